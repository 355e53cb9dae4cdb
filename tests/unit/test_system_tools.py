"""The programs the tests need: one set-up installs them, ``python -m tests`` checks them
first and ends with the totals of its three parts (tests/__main__.py)."""

from __future__ import annotations

import re

import pytest

from tests import __main__ as suite
from tests.support import system_tools
from tests.support.crawling import ROOT

pytestmark = pytest.mark.pure

SCRIPT = (ROOT / system_tools.SETUP).read_text()


def test_the_setup_script_installs_every_program_the_tests_check():
    pairs = dict(re.findall(r"^\s+([\w-]+):([\w-]+)", SCRIPT, re.M))
    assert {p: pairs.get(p) for p in system_tools.PROGRAMS} == system_tools.PROGRAMS
    assert {"nginx", "tinyproxy", "squid"} <= set(system_tools.PROGRAMS)


def test_ci_and_the_readme_use_the_setup_script_and_the_readme_test_command():
    ci = (ROOT / ".ci/run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert system_tools.SETUP in ci and system_tools.SETUP in readme
    assert re.search(r"^python -m tests\b", ci, re.M) and "python -m tests " in readme


def test_a_test_that_needs_a_missing_program_fails_with_the_one_reason(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception) as e:
        system_tools.need("chromium")
    assert str(e.value) == system_tools.reason(["chromium"])
    assert "not installed: chromium; install them with `scripts/install-system-packages.sh`" in str(e.value)


def test_preflight_names_every_missing_program_in_one_line():
    line = suite.preflight([], missing=lambda: ["chromium", "prometheus-pushgateway"])
    assert line == (
        "python -m tests: not installed: chromium, prometheus-pushgateway; "
        "install them with `scripts/install-system-packages.sh` (the README's set-up)"
    )
    assert suite.preflight(["-x"], missing=lambda: []) is None
    # the plain-Python tests need no program; any other path does
    unit = str(ROOT / "tests" / "unit")
    assert suite.preflight([unit, "-x"], missing=lambda: ["chromium"]) is None
    assert suite.preflight([f"{unit}/test_system_tools.py::test_x"], missing=lambda: ["chromium"]) is None
    assert suite.preflight([unit, str(ROOT / "tests" / "crawl")], missing=lambda: ["chromium"]) is not None


@pytest.mark.parametrize(
    ("last", "counts"),
    [
        ("3 failed, 1202 passed, 8 skipped, 2 warnings in 523.10s (0:08:43)", (1202, 3, 8, 0)),
        ("========= 1 failed, 7 passed, 1 error in 3.02s =========", (7, 1, 0, 1)),
        ("==== 12 passed, 2 errors, 40 deselected in 1.50s ====", (12, 0, 0, 2)),
        ("1 skipped, 200 deselected in 0.91s", (0, 0, 1, 0)),
        ("no tests ran in 0.50s", (0, 0, 0, 0)),
    ],
)
def test_a_parts_summary_line_is_read(last, counts):
    output = f"tests/unit/test_a.py ....  [100%]\n1 passed in 0.01s (an earlier line)\n{last}\n"
    got = suite.summary_counts(output)
    assert got is not None
    assert (got["passed"], got["failed"], got["skipped"], got["errors"]) == counts


def test_the_last_line_sums_the_parts_in_pytests_words():
    notes, line = suite.totals_line(
        ["3 failed, 1202 passed, 8 skipped in 500.00s", "40 passed, 1 error in 80.00s", "no summary: killed"]
    )
    assert line == "total: 1242 passed, 4 failed, 8 skipped"
    # the form CI parses: "N passed, N failed" then ", N skipped", one word with a colon before
    assert re.fullmatch(r"(\w+: )?\d+ passed, \d+ failed(, \d+ skipped)?", line)
    assert notes == [
        "+ part 3 printed no pytest summary: its tests are not in the total",
        "+ 1 errors (collection, set-up or teardown) are counted as failed",
    ]
    assert suite.summary_counts("no summary: killed") is None
