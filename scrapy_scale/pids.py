"""Is a process of this host still alive (worker ids, stale metric files)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a live (non-zombie) process on this host?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
