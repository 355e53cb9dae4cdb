"""``python -m tests [PYTEST ARGS]``: the whole suite as CI runs it, in three parts at once.

1. every test not marked ``serial`` or ``paced``, spread over pytest-xdist workers (``-n``,
   default 4; ``SCALE_TEST_WORKERS`` sets it), handed out one at a time, the longest first
   (tests/conftest.py, LONGEST_FIRST), at the lowest CPU priority (``nice`` 19), its hang
   guards stretched 5 times (``SCALE_TEST_HANG_FACTOR``, tests/support/hang.py);
2. the ``paced`` tests (timing bounds, light on CPU), two at a time;
3. the ``serial`` tests (timing bounds, several workers, servers restarted, CPU-bound
   measures), one at a time, those that measure the machine's own speed last
   (tests/conftest.py, SERIAL_LAST).

The three parts start together. Parts 2 and 3 hold timing bounds and run at normal
priority: the kernel gives them the CPU whenever they want it, and part 1 the rest, so the
suite takes about as long as its longest part, not the sum of the three (on the 2-core CI
machine 9-10 minutes instead of 18; the suite needs about 14 CPU-minutes, so 2 cores
cannot run it in much less, and each Scrapy process spends about 0.75 s importing Scrapy).
The paced part ends well before the serial one; the probe's tests, which drive a site as
hard as the machine can, run last, after it (with the paced part beside them, a loaded
probe judged the wrong knee once). Parts 1 and 2 write to files, printed
when each part ends, after part 3's own output. ``SCALE_TEST_SEQUENTIAL=1`` runs the
parts one after the other at normal priority instead (a slower machine, or to rule the
sharing out when a timing test fails); ``SCALE_TEST_WORKERS=0`` does too, each part in
one process.

PYTEST ARGS go to every part (paths, ``-x``, ``-k``, ``--durations=N``...; not ``-m``,
which this script owns: for one tier use pytest itself, e.g. ``python -m pytest -m "not
crawl"``). Every part runs even when another failed, so one run shows every failure; the
exit status is the first non-zero one. A part that selects no test (a path with no serial
test in it) counts as passed. The last line sums the three parts' pytest summaries, in
pytest's words: ``total: N passed, N failed, N skipped`` (errors counted as failed).

Before anything runs, the system programs the tests use are checked
(tests/support/system_tools.py): when one is missing, one line names them and the set-up
command, and the exit status is 3, so a machine without, say, Chromium fails at once
instead of in the few tests that need it. Only ``tests/unit`` paths need no program.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import IO

from tests.support import system_tools
from tests.support.hang import FACTOR_ENV

NO_TESTS = 5  # pytest's exit status when nothing was selected
MISSING_PROGRAM = 3  # this script's exit status when a program the tests use is missing
_UNIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unit")  # tests needing no program
NICE = 19  # part 1's priority beside the timing tests
#: part 1's hang guards are stretched this much (tests/support/hang.py): at nice 19 beside a
#: serial test that drives both cores, a test there can be starved for minutes (in CI two
#: Scrapy starts that fail at once on a bad setting outlasted their 60 s guard)
HANG_FACTOR = "5"


def _argv(part: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *part]


def _result(codes: list[int]) -> int:
    ran = [c for c in codes if c != NO_TESTS]
    return next((c for c in ran if c != 0), 0) if ran else NO_TESTS


#: pytest's last line: "3 failed, 1202 passed, 8 skipped, 2 warnings in 523.10s (0:08:43)",
#: between rows of "=" unless -q; "no tests ran in 0.50s" when nothing ran
_SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+|no tests ran) in \d+(?:\.\d+)?s\b")
_COUNT = re.compile(r"(\d+) (\w+)")
_WORDS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors", "errors": "errors"}


def summary_counts(output: str) -> Counter[str] | None:
    """The passed, failed, skipped and errors of pytest's summary line in ``output`` (its
    last), or None when it has none (pytest did not get to the end)."""
    for line in reversed(output.splitlines()):
        m = _SUMMARY.match(line.strip())
        if m:
            counts: Counter[str] = Counter()
            for n, word in _COUNT.findall(m["counts"]):
                if word in _WORDS:
                    counts[_WORDS[word]] += int(n)
            return counts
    return None


def totals_line(outputs: list[str]) -> tuple[list[str], str]:
    """Notes on the parts' summaries, and the last line: their sum in pytest's words,
    ``total: N passed, N failed, N skipped``, errors counted as failed."""
    total: Counter[str] = Counter()
    notes = []
    for i, out in enumerate(outputs, 1):
        counts = summary_counts(out)
        if counts is None:
            notes.append(f"+ part {i} printed no pytest summary: its tests are not in the total")
        else:
            total += counts
    if total["errors"]:
        notes.append(f"+ {total['errors']} errors (collection, set-up or teardown) are counted as failed")
    line = f"total: {total['passed']} passed, {total['failed'] + total['errors']} failed, {total['skipped']} skipped"
    return notes, line


def preflight(args: list[str], missing: Callable[[], list[str]] = system_tools.missing) -> str | None:
    """The one line naming the programs the selected tests need and this machine lacks, or
    None. Paths all under tests/unit need none (the plain-Python tests)."""
    paths = [a for a in args if not a.startswith("-") and os.path.exists(a.split("::")[0])]
    if paths and all(os.path.abspath(p.split("::")[0]).startswith(_UNIT) for p in paths):
        return None
    names = missing()
    return f"python -m tests: {system_tools.reason(names)}" if names else None


def _call(argv: list[str]) -> tuple[int, str]:
    """Run ``argv``, its output shown as it comes and returned."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    kept = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        kept.append(line)
    return proc.wait(), "".join(kept)


def _show(title: str, out: IO[str]) -> str:
    print(f"\n+ {title}:", flush=True)
    out.seek(0)
    text = out.read()
    sys.stdout.write(text)
    sys.stdout.flush()
    return text


def _finish(codes: list[int], outputs: list[str]) -> int:
    notes, line = totals_line(outputs)
    for note in notes:
        print(note)
    print(line, flush=True)
    return _result(codes)


def main(args: list[str]) -> int:
    if any(a == "-m" or a.startswith("-m") and not a.startswith("--") for a in args):
        print("python -m tests: -m is set by this script; run python -m pytest -m ... for one tier", file=sys.stderr)
        return 4
    problem = preflight(args)
    if problem:
        print(problem, flush=True)
        return MISSING_PROGRAM
    workers = os.environ.get("SCALE_TEST_WORKERS", "4")
    spread = workers != "0"
    parts = [
        ["-m", "not serial and not paced", *(["-n", workers, "--maxschedchunk", "1"] if spread else []), *args],
        ["-m", "paced", *(["-n", "2", "--maxschedchunk", "1"] if spread else []), *args],
        ["-m", "serial", "-p", "no:xdist", *args],
    ]
    if not spread or os.environ.get("SCALE_TEST_SEQUENTIAL", "") not in ("", "0"):
        codes, outputs = [], []
        for part in parts:
            print("+ " + " ".join(_argv(part)), flush=True)
            code, output = _call(_argv(part))
            codes.append(code)
            outputs.append(output)
        return _finish(codes, outputs)
    started = time.monotonic()
    with (
        tempfile.NamedTemporaryFile("w+", prefix="scale-tests-part1-", suffix=".log") as out1,
        tempfile.NamedTemporaryFile("w+", prefix="scale-tests-part2-", suffix=".log") as out2,
    ):
        print(f"+ nice -n {NICE} " + " ".join(_argv(parts[0])) + f"  > {out1.name}")
        print("+ " + " ".join(_argv(parts[1])) + f"  > {out2.name}")
        print("+ " + " ".join(_argv(parts[2])), flush=True)
        env1 = {**os.environ, FACTOR_ENV: os.environ.get(FACTOR_ENV) or HANG_FACTOR}
        p1 = subprocess.Popen(
            _argv(parts[0]), stdout=out1, stderr=subprocess.STDOUT, env=env1, preexec_fn=lambda: os.nice(NICE)
        )
        p2 = subprocess.Popen(_argv(parts[1]), stdout=out2, stderr=subprocess.STDOUT)
        code3, text3 = _call(_argv(parts[2]))
        took3 = time.monotonic() - started
        code2 = p2.wait()
        text2 = _show("part 2, the paced tests", out2)
        code1 = p1.wait()
        text1 = _show(f"part 1, in parallel at nice {NICE}", out1)
        print(f"\n+ python -m tests: serial part {took3:.0f} s, all {time.monotonic() - started:.0f} s", flush=True)
        return _finish([code1, code2, code3], [text1, text2, text3])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
