"""``python -m tests [PYTEST ARGS]``: the whole suite as CI runs it, in two parts.

1. every test not marked ``serial``, spread over pytest-xdist workers (``-n``, default 4;
   ``SCALE_TEST_WORKERS`` sets it, ``0`` runs this part in one process too), handed out
   two at a time, the longest first (tests/conftest.py, LONGEST_FIRST);
2. the ``paced`` tests (timing bounds, light on CPU), two at a time;
3. the ``serial`` tests (timing bounds, several workers, servers restarted, CPU-bound
   measures), one at a time, with nothing else running beside them.

PYTEST ARGS go to both parts (paths, ``-x``, ``-k``, ``--durations=N``...; not ``-m``,
which this script owns: for one tier use pytest itself, e.g. ``python -m pytest -m "not
crawl"``). Each part runs even when one before it failed, so one run shows every
failure; the exit status is the first non-zero one. A part that selects no test (a
path with no serial test in it) counts as passed. ``SCALE_TEST_WORKERS=0`` runs every part
in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys

NO_TESTS = 5  # pytest's exit status when nothing was selected


def main(args: list[str]) -> int:
    if any(a == "-m" or a.startswith("-m") and not a.startswith("--") for a in args):
        print("python -m tests: -m is set by this script; run python -m pytest -m ... for one tier", file=sys.stderr)
        return 4
    workers = os.environ.get("SCALE_TEST_WORKERS", "4")
    spread = workers != "0"
    parts = [
        ["-m", "not serial and not paced", *(["-n", workers, "--maxschedchunk", "1"] if spread else []), *args],
        ["-m", "paced", *(["-n", "2", "--maxschedchunk", "1"] if spread else []), *args],
        ["-m", "serial", "-p", "no:xdist", *args],
    ]
    status = 0
    ran = False
    for part in parts:
        argv = [sys.executable, "-m", "pytest", *part]
        print("+ " + " ".join(argv), flush=True)
        code = subprocess.call(argv)
        if code == NO_TESTS:
            continue
        ran = True
        status = status or code
    return status if ran else NO_TESTS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
