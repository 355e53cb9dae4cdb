"""The system programs the tests use, and the one check every test makes for one of them.

A test that needs a program calls :func:`need` (the path, or the test fails with the one
reason below); ``python -m tests`` checks every program in :data:`PROGRAMS` before it runs
anything (:func:`missing`) and stops with one line when one is missing. So a machine
without, say, Chromium fails early and the same way for every test that needs it, never
some tests skipped and others failed. scripts/install-system-packages.sh installs them
(tests/unit/test_system_tools.py checks that it names every package here).
"""

from __future__ import annotations

import shutil

#: the set-up command that installs every program below (the README's set-up, .ci/run)
SETUP = "scripts/install-system-packages.sh"

#: program the tests run -> the Debian package that holds it
PROGRAMS = {
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
    "chromium": "chromium",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-pushgateway": "prometheus-pushgateway",
    "nginx": "nginx",
    "tinyproxy": "tinyproxy",
    "squid": "squid",
}


def missing(programs: dict[str, str] = PROGRAMS) -> list[str]:
    """The programs not on PATH, in their order."""
    return [p for p in programs if shutil.which(p) is None]


def reason(names: list[str]) -> str:
    """The one line that names missing programs and how to install them."""
    return f"not installed: {', '.join(names)}; install them with `{SETUP}` (the README's set-up)"


def need(program: str) -> str:
    """The path of ``program``; the test fails with :func:`reason` when it is not on PATH."""
    import pytest

    assert program in PROGRAMS, f"{program}: add it to PROGRAMS and to {SETUP}"
    path = shutil.which(program)
    if path is None:
        pytest.fail(reason([program]))
    return path
