"""examples/distributed/run.py stopped by its user: killed -9, it leaves no process behind
(its Redis, MongoDB wire server, Prometheus and workers die with it: before, six stayed);
Ctrl-C (SIGINT) stops it with one line, no traceback (issue 35, also)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.crawling import ROOT
from tests.support.hang import hang_guard

pytestmark = [pytest.mark.crawl, pytest.mark.serial]

WORKERS = 3


def _processes_under(workdir: Path) -> dict[int, str]:
    """Live processes whose command line names ``workdir`` (every child of the script does)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")), "")
        except OSError:
            continue
        if str(workdir) in cmd and "zombie" not in state:
            out[int(d.name)] = cmd[:120]
    return out


def _start(tmp_path: Path, *more: str) -> tuple[subprocess.Popen[str], Path]:
    work = tmp_path / "work"
    argv = [sys.executable, str(ROOT / "examples" / "distributed" / "run.py"), "--workdir", str(work)]
    argv += ["--hosts", "2", "--pages", "300", *more]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the moment: every worker is up (each wrote its Prometheus file_sd target)
    deadline = time.monotonic() + hang_guard(180)
    while len(list((work / "file_sd").glob("*.json"))) < WORKERS:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the workers did not come up"
        time.sleep(0.2)
    return proc, work


def _gone(work: Path, timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + hang_guard(timeout)
    left = _processes_under(work)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _processes_under(work)
    return left


def _reap(left: dict[int, str]) -> None:
    for pid in left:  # (the test's own leftovers, by pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.timeout(400)
def test_killed_minus_9_it_leaves_no_process_behind(tmp_path: Path) -> None:
    proc, work = _start(tmp_path)
    children = _processes_under(work)
    assert len(children) >= WORKERS + 3, children  # Redis, MongoDB, Prometheus and the workers
    proc.kill()
    proc.communicate()
    left = _gone(work, 20)
    _reap(left)
    assert not left, f"{len(left)} processes outlived the script: {left}"


@pytest.mark.timeout(400)
def test_ctrl_c_stops_it_with_one_line(tmp_path: Path) -> None:
    proc, work = _start(tmp_path, "--no-prometheus")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=hang_guard(120))
    left = _gone(work, 20)
    _reap(left)
    assert proc.returncode == 130, (proc.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines() == ["interrupted: the workers and the servers are stopped"], err[-3000:]
    assert not left, f"{len(left)} processes outlived the script: {left}"
