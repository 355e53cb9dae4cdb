"""What a record, a seed or a job name in a shared Redis can do to a worker: nothing but
be crawled or be refused (docs/frontier.md, "What a shared Redis can and cannot do to a
worker"). Real Redis (the shared one, keys under the test's unique prefix)."""

from __future__ import annotations

import pytest

from scrapy_scale import config
from scrapy_scale.frontier.redis_store import RedisStore, glob_escape
from scrapy_scale.frontier.store import FrontierError
from tests.test_commands import scale

# ---- job names (item 11) -------------------------------------------------------------------


def test_a_job_name_with_glob_characters_never_touches_another_job(redis_url: str, redis_prefix: str) -> None:
    other = RedisStore(redis_url, f"{redis_prefix}-books1")
    other.open()
    try:
        other.begin_run()
        other.seed(["http://shop.example/a", "http://shop.example/b"])
        with pytest.raises(FrontierError, match=r"job name .*books\[1\].* is not allowed"):
            bad = RedisStore(redis_url, f"{redis_prefix}-books[1]")
            bad.open()
            bad.begin_run()
            bad.reset()  # before: its SCAN MATCH pattern matched books1's keys and unlinked them
        assert other.counts()["pending"] == 2
    finally:
        other.close()


def test_the_scan_pattern_is_escaped(redis_url: str, redis_prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.set(f"{redis_prefix}:books1:x", 1)
    r.set(f"{redis_prefix}:books*:x", 1)
    assert list(r.scan_iter(match=glob_escape(f"{redis_prefix}:books[1]:") + "*")) == []
    assert list(r.scan_iter(match=glob_escape(f"{redis_prefix}:books*:") + "*")) == [f"{redis_prefix}:books*:x"]
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"


@pytest.mark.parametrize("name", ["books[1]", "a*", "a b", "x:y", "{j}", "", ".hidden", "-x", "é", "j" * 101])
def test_scale_job_is_checked_at_startup(name: str) -> None:
    with pytest.raises(config.ScaleSettingError) as e:
        config.get({"SCALE_JOB": name}, "SCALE_JOB")
    assert e.value.setting == "SCALE_JOB"
    if name:
        assert "letters, digits" in str(e.value)


@pytest.mark.parametrize("name", ["books1", "catalog", "shop.example-2026_11", "J" * 100])
def test_ordinary_job_names_are_accepted(name: str) -> None:
    assert config.get({"SCALE_JOB": name}, "SCALE_JOB") == name


def test_scale_reset_refuses_a_glob_job_name(redis_url: str, redis_prefix: str) -> None:
    other = RedisStore(redis_url, f"{redis_prefix}-books1")
    other.open()
    try:
        other.begin_run()
        other.seed(["http://shop.example/a"])
        p = scale("reset", f"{redis_prefix}-books[1]", settings={"SCALE_FRONTIER_URL": redis_url})
        assert p.returncode == 1, p.stdout + p.stderr
        assert "is not allowed" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert other.counts()["pending"] == 1
    finally:
        other.close()
