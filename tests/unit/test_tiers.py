"""The test tiers (tests/conftest.py): every test declares crawl or pure, and a pure test
stays in this process. Checked on small throwaway test modules run by pytester."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.pure

pytest_plugins = ("pytester",)

CONFTEST = "from tests.conftest import _pure_stays_in_process, pytest_collection_modifyitems  # noqa: F401\n"


@pytest.fixture
def tiers(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    crawl: c\n    pure: p\n    serial: s\n")
    return pytester


def test_a_module_that_declares_no_tier_fails_collection_naming_the_test(tiers: pytest.Pytester) -> None:
    tiers.makepyfile(test_new="def test_something():\n    pass\n")
    r = tiers.runpytest()
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*test_new.py::test_something: has neither of the markers crawl/pure*"])


def test_module_marks_and_function_marks_each_give_one_tier(tiers: pytest.Pytester) -> None:
    tiers.makepyfile(
        test_mod="import pytest\npytestmark = pytest.mark.crawl\ndef test_c():\n    pass\n",
        test_fn=(
            "import pytest\n@pytest.mark.pure\ndef test_p():\n    pass\n"
            "@pytest.mark.crawl\n@pytest.mark.serial\ndef test_s():\n    pass\n"
        ),
    )
    tiers.runpytest("-m", "not crawl").assert_outcomes(passed=1, deselected=2)
    tiers.runpytest("-m", "serial").assert_outcomes(passed=1, deselected=2)


def test_both_tiers_or_serial_without_crawl_fail_collection(tiers: pytest.Pytester) -> None:
    tiers.makepyfile(
        test_both="import pytest\npytestmark = pytest.mark.crawl\n@pytest.mark.pure\ndef test_x():\n    pass\n",
        test_ser="import pytest\npytestmark = [pytest.mark.pure, pytest.mark.serial]\ndef test_y():\n    pass\n",
    )
    r = tiers.runpytest()
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        ["*test_both.py::test_x: has crawl and pure*", "*test_ser.py::test_y: marked serial but not crawl*"]
    )


def test_a_pure_test_that_asks_for_a_service_fixture_fails_collection(tiers: pytest.Pytester) -> None:
    tiers.makepyfile(
        test_svc=(
            "import pytest\npytestmark = pytest.mark.pure\n"
            "@pytest.fixture\ndef redis_url():\n    return 'redis://x'\n"
            "def test_r(redis_url):\n    pass\n"
        )
    )
    r = tiers.runpytest()
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*test_svc.py::test_r: marked pure but uses redis_url: mark it crawl*"])


def test_a_pure_test_that_starts_a_process_or_opens_a_socket_fails_naming_it(tiers: pytest.Pytester) -> None:
    tiers.makepyfile(
        test_leaks=(
            "import socket, subprocess, sys, pytest\npytestmark = pytest.mark.pure\n"
            "def test_proc():\n    subprocess.run([sys.executable, '-c', 'pass'])\n"
            "def test_mp():\n    import multiprocessing\n    multiprocessing.Process(target=print).start()\n"
            "def test_sock():\n    socket.create_connection(('127.0.0.1', 9))\n"
            "def test_unix_socketpair_is_fine():\n    a, b = socket.socketpair()\n    a.close(); b.close()\n"
        )
    )
    r = tiers.runpytest()
    r.assert_outcomes(passed=1, failed=3)
    r.stdout.fnmatch_lines(["*a test marked pure starts a process: mark it crawl*"])
    r.stdout.fnmatch_lines(["FAILED test_leaks.py::test_mp - AssertionError: a test marked pure starts a*"])
    r.stdout.fnmatch_lines(["*a test marked pure opens a network socket to ('127.0.0.1', 9): mark it crawl*"])


def test_a_module_in_the_wrong_folder_is_named_with_the_folder_it_belongs_in(tmp_path) -> None:
    from tests.conftest import folder_problem

    tests = tmp_path / "tests"
    for sub in ("unit", "crawl", "support"):
        (tests / sub).mkdir(parents=True)
    assert folder_problem("x", "pure", tests / "unit" / "test_a.py", tests) is None
    assert folder_problem("x", "crawl", tests / "crawl" / "test_a.py", tests) is None
    assert folder_problem("x", "pure", tests / "crawl" / "test_a.py", tests) == (
        "x: marked pure but in tests/crawl/: move the module to tests/unit/"
    )
    assert folder_problem("x", "crawl", tests / "unit" / "test_a.py", tests) == (
        "x: marked crawl but in tests/unit/: move the module to tests/crawl/"
    )
    assert folder_problem("x", "crawl", tests / "test_a.py", tests) == (
        "x: marked crawl but in tests/: move the module to tests/crawl/"
    )
    assert folder_problem("x", "pure", tests / "support" / "test_a.py", tests) == (
        "x: marked pure but in tests/support/: move the module to tests/unit/"
    )
    assert folder_problem("x", "pure", tmp_path / "elsewhere" / "test_a.py", tests) is None


def test_every_collected_module_of_this_suite_sits_in_its_tier_folder(request: pytest.FixtureRequest) -> None:
    """The check runs on the real suite: this module is pure and in tests/unit/."""
    from tests.conftest import folder_problem

    assert folder_problem(request.node.nodeid, "pure", request.path) is None
    assert folder_problem(request.node.nodeid, "crawl", request.path) is not None


def test_long_tests_start_first_one_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handed out two at a time, each worker's first two tests hold one long test; an entry
    of LONGEST_FIRST is a module or a single test."""
    from types import SimpleNamespace

    import tests.conftest as conftest

    monkeypatch.setattr(conftest, "LONGEST_FIRST", ("m.py::slow", "a.py", "b.py"))
    names = ("x.py::1", "b.py::t", "m.py::quick", "x.py::2", "a.py::t1", "m.py::slow", "a.py::t2", "x.py::3")
    got = [i.nodeid for i in conftest.long_tests_first([SimpleNamespace(nodeid=n) for n in names])]  # type: ignore[misc]
    assert got == [
        "m.py::slow",
        "x.py::1",
        "a.py::t1",
        "m.py::quick",
        "a.py::t2",
        "x.py::2",
        "b.py::t",
        "x.py::3",
    ]


def test_hang_guards_stretch_by_the_factor_and_refuse_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Part 1 of ``python -m tests`` stretches its hang guards (tests/support/hang.py); a
    factor that would shrink them, or is not a number, is refused rather than ignored."""
    from tests.support.hang import FACTOR_ENV, hang_guard

    monkeypatch.delenv(FACTOR_ENV, raising=False)
    assert hang_guard(60) == 60
    monkeypatch.setenv(FACTOR_ENV, "5")
    assert hang_guard(60) == 300
    for bad in ("0.5", "nan", "inf", "fast"):
        monkeypatch.setenv(FACTOR_ENV, bad)
        with pytest.raises(ValueError):
            hang_guard(60)
