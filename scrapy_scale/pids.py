"""Is a process of this host still alive (worker ids, stale metric files)."""

from __future__ import annotations

import os

#: the largest pid a process can have (Linux: pid_max is at most 2**22; any int32)
PID_MAX = 2**31 - 1


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a live (non-zombie) process on this host? A pid read back from shared
    state or a file name may be anything: one that is not an int from 1 to PID_MAX is no
    process (0 and -1 would ask about process groups; 20 digits: OverflowError in os.kill)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= PID_MAX:
        return False
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
