"""Fixtures that start real services on loopback (see tests/support/services.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import services

SHARED_REDIS = os.environ.get("SCALE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis already running on 127.0.0.1:6379 (CI starts it when missing)."""
    try:
        services.redis_ping(SHARED_REDIS)
    except Exception as e:  # noqa: BLE001
        pytest.fail(
            f"no Redis at {SHARED_REDIS} ({e}); start one with "
            "`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save ''`"
        )
    return SHARED_REDIS


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix (usable as a job name) on the shared Redis; its keys are deleted after."""
    import redis

    prefix = f"scaletest-{uuid.uuid4().hex[:10]}"
    yield prefix
    r = redis.Redis.from_url(redis_url)
    for key in r.scan_iter(match=f"*{prefix}*", count=1000):
        r.delete(key)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[services.Process]:
    """A private Redis (AOF on) that the test may kill and restart."""
    p = services.private_redis(tmp_path / "redis")
    yield p
    p.kill()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[services.RedisCluster]:
    """A private Redis Cluster (3 primaries with a replica each, AOF on), stopped after.
    Several server processes: a test that asks for it is marked ``serial``."""
    c = services.private_cluster(tmp_path / "cluster")
    yield c
    c.stop()


@pytest.fixture(scope="session")
def mongo_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """MONGO_URI when set (a real mongod), else a SecantusDB server for the session."""
    env = os.environ.get("MONGO_URI")
    if env:
        services.wait_until(lambda: services.mongo_ping(env), 10, f"MongoDB at {env}")
        yield env
        return
    p = services.private_mongo(tmp_path_factory.mktemp("mongo"))
    yield f"mongodb://127.0.0.1:{p.port}/"
    p.kill()


@pytest.fixture
def mongo_server(tmp_path: Path) -> Iterator[services.Process]:
    """A private MongoDB wire server that the test may kill and restart."""
    p = services.private_mongo(tmp_path / "mongo")
    yield p
    p.kill()


# ---- tiers: `pytest -m "not crawl"` runs the pure tests alone, in seconds ----------
#
# Each test module declares its tier: ``pytestmark = pytest.mark.crawl`` (it runs real
# processes or servers: crawls, the testbed, Redis, MongoDB, Prometheus, Chromium...) or
# ``pytest.mark.pure`` (plain Python in this process), and sits in its tier's folder:
# tests/unit/ (pure) or tests/crawl/ (crawl, serial or not); helpers that hold no tests
# live in tests/support/. Collection fails for a test with neither mark or both, or in the
# wrong folder, so a new module cannot land in the wrong tier by accident; and a pure test
# may not ask for a service fixture nor start a process or open a network socket (checked
# while it runs). ``serial`` (with ``crawl``): a loaded machine could break the test (an
# upper time bound, a measured rate, a lease of a few seconds, several workers, a server
# restarted on its port, which a parallel test may take meanwhile); a kill -9 at a moment
# chosen from progress is no reason. ``paced`` (with ``crawl``, instead of ``serial``): a
# timing bound too, but the test is light on CPU (a few requests per second from one
# worker, no CPU-bound measure): two of them run at once. `python -m tests`
# (tests/__main__.py) runs the paced tests two at a time and the serial ones one at a time
# (SERIAL_LAST at the end) beside the parallel part, which runs at the lowest CPU priority.

TIERS = ("crawl", "pure")
#: the crawl tests that do not run in the parallel part: ``paced`` two at a time, ``serial`` one at a time
LANES = ("paced", "serial")
TESTS = Path(__file__).resolve().parent
#: the folder under tests/ that holds each tier's modules; tests/support/ holds no tests
FOLDERS = {"pure": "unit", "crawl": "crawl"}


def folder_problem(nodeid: str, tier: str, path: Path, tests: Path = TESTS) -> str | None:
    """Why a test of ``tier`` at ``path`` sits in the wrong folder of ``tests``, or None.

    Paths outside ``tests`` (pytester's throwaway modules) are not checked."""
    try:
        parts = path.resolve().relative_to(tests).parts
    except ValueError:
        return None
    want = FOLDERS[tier]
    if len(parts) > 1 and parts[0] == want:
        return None
    where = f"tests/{parts[0]}/" if len(parts) > 1 else "tests/"
    return f"{nodeid}: marked {tier} but in {where}: move the module to tests/{want}/"


SERVICE_FIXTURES = frozenset(
    {"redis_url", "redis_prefix", "redis_server", "redis_cluster", "mongo_uri", "mongo_server"}
)


def tier_problem(item: pytest.Item) -> str | None:
    """Why ``item`` cannot be collected as it is (its tier markers), or None."""
    tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
    if len(tiers) != 1:
        have = " and ".join(sorted(tiers)) or "neither"
        return (
            f"{item.nodeid}: has {have} of the markers crawl/pure; declare exactly one "
            "(`pytestmark = pytest.mark.crawl` or `pytest.mark.pure` in the module, or on "
            "each test function of a module with both kinds)"
        )
    used = SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
    if tiers == {"pure"} and used:
        return f"{item.nodeid}: marked pure but uses {', '.join(sorted(used))}: mark it crawl"
    for lane in LANES:
        if item.get_closest_marker(lane) and tiers != {"crawl"}:
            return f"{item.nodeid}: marked {lane} but not crawl"
    if all(item.get_closest_marker(lane) for lane in LANES):
        return f"{item.nodeid}: marked both {' and '.join(LANES)}: one lane only"
    return folder_problem(item.nodeid, next(iter(tiers)), Path(item.path))


#: modules (or single tests) that take minutes. They start first, one per xdist worker (python -m tests
#: hands tests out two at a time, in this order: see long_tests_first), so that the parallel
#: part does not end with one worker busy on a long test alone
LONGEST_FIRST = (
    # a 30 s page keeps the crawl open while a dead egress comes back: ~1.5 min
    "tests/crawl/test_egress_crawl.py::test_a_dead_egress_that_comes_back_is_reprobed_and_returns_to_service",
    "tests/crawl/test_frontier_crash.py",  # 2 x 11 kill -9 and restarts: ~2 min each
    "tests/crawl/test_scrapyd.py",  # a real scrapyd, deploys, kills and restarts: ~1-2 min each
    "tests/crawl/test_egress_browser.py",  # Chromium, a context per page: up to ~1.5 min
    "tests/crawl/test_quality_report.py",  # several crawls and a headless screenshot
    "tests/crawl/test_feed_resume.py",  # kill -9 and resume, three ways
)


def _long_rank(item: pytest.Item) -> int | None:
    """The place of ``item`` in LONGEST_FIRST (by its test id, else its module), or None."""
    for key in (item.nodeid, item.nodeid.split("::")[0]):
        if key in LONGEST_FIRST:
            return LONGEST_FIRST.index(key)
    return None


def long_tests_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with those of LONGEST_FIRST (modules, or single tests) first, each followed
    by one other test: with ``--maxschedchunk 1`` every worker starts with two tests, so
    each gets one long test."""
    long = sorted((i for i in items if _long_rank(i) is not None), key=lambda i: _long_rank(i) or 0)
    rest = [i for i in items if _long_rank(i) is None]
    out: list[pytest.Item] = []
    for n, item in enumerate(long):
        out.append(item)
        if n < len(rest):
            out.append(rest[n])
    return out + rest[len(long) :]


#: serial tests that measure the machine's own speed (the probe drives a site as hard as the
#: test machine can): they run last, once the paced part, which ends well before the serial
#: one, is over (beside it, a loaded probe could not hold its steps' concurrency and judged
#: the wrong knee)
SERIAL_LAST = ("tests/crawl/test_probe_crawl.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = [p for p in map(tier_problem, items) if p]
    if problems:
        raise pytest.UsageError("test tiers:\n  " + "\n  ".join(problems))
    items[:] = long_tests_first(items)
    items.sort(key=lambda i: i.nodeid.split("::")[0] in SERIAL_LAST)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _pure_stays_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked pure that starts a process or opens a network socket fails, naming it."""
    if request.node.get_closest_marker("pure") is None:
        return
    import multiprocessing.process
    import socket
    import subprocess

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a test marked pure {what}: mark it crawl")

        return refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("starts a process"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("starts a process"))
    for name in ("connect", "connect_ex", "bind"):
        real = getattr(socket.socket, name)

        def guarded(sock: socket.socket, address: Any, *, _real: Any = real) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                raise AssertionError(f"a test marked pure opens a network socket to {address!r}: mark it crawl")
            return _real(sock, address)

        monkeypatch.setattr(socket.socket, name, guarded)
