"""Fixtures that start real services on loopback (see tests/services.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services

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


# ---- markers: `pytest -m "not crawl"` runs the pure tests alone, in seconds ----------

#: a test module that uses one of these runs real processes or servers (crawls, Redis,
#: MongoDB, Prometheus, Chromium...): its tests are marked ``crawl``
_REAL_PARTS = (
    "run_crawl",
    "start_crawl",
    "Testbed",
    "TestbedProcess",
    "subprocess",
    "redis_url",
    "redis_prefix",
    "redis_server",
    "mongo_uri",
    "mongo_server",
    "services.",
    "crash_and_resume",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    real: dict[str, bool] = {}
    for item in items:
        path = str(item.fspath)
        if path not in real:
            try:
                text = Path(path).read_text()
            except OSError:
                text = ""
            real[path] = any(word in text for word in _REAL_PARTS)
        fixtures = set(getattr(item, "fixturenames", ()))
        if real[path] or fixtures & {"redis_url", "redis_prefix", "redis_server", "mongo_uri", "mongo_server"}:
            item.add_marker(pytest.mark.crawl)
        else:
            item.add_marker(pytest.mark.pure)
