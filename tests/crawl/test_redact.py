"""One redaction function for every URL the project prints (scrapy_scale/redact.py): every
form of credentials, the `scrapy scale` commands against a Redis that wants a password,
and the outcome log of a crawl whose URLs carry `user:pass@`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.crawl.test_commands import scale
from tests.support import services
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl


@pytest.mark.parametrize("form", ["query", "userinfo"])
def test_scale_status_never_prints_the_redis_password(tmp_path: Path, form: str) -> None:
    from scrapy_scale.frontier import open_store

    redis = services.private_redis(tmp_path / "redis", appendonly=False, password="s3cretpw")
    try:
        base = f"127.0.0.1:{redis.port}/0"
        url = f"redis://{base}?password=s3cretpw" if form == "query" else f"redis://:s3cretpw@{base}"
        store = open_store(url, "pw")
        try:
            store.seed(["http://shop.example/"])
        finally:
            store.close()
        s = {"SCALE_FRONTIER_URL": url}
        ok = scale("status", "pw", settings=s)
        assert ok.returncode == 0, ok.stderr
        assert "pending" in ok.stdout and "127.0.0.1" in ok.stdout
        as_json = scale("status", "pw", "--json", settings=s)
        unknown = scale("status", "nosuchjob", settings=s)
        assert unknown.returncode == 1 and "unknown job 'nosuchjob'" in unknown.stderr, unknown.stderr
        for p in (ok, as_json, unknown):
            assert "s3cretpw" not in p.stdout + p.stderr
    finally:
        redis.kill()


def test_the_outcome_log_redacts_request_urls(tmp_path: Path) -> None:
    log = tmp_path / "outcomes.jsonl"
    with Testbed(hosts=1, pages=4, seed=3) as tb:
        start = tb.start_urls[0].replace("http://", "http://alice:s3cretpw@")
        res = run_crawl(
            tb, {"SCALE_OUTCOME_LOG": str(log), "ROBOTSTXT_OBEY": False}, tmp_path, start_urls=[start], timeout=90
        )
    assert res.returncode == 0, res.tail()
    text = log.read_text()
    outcomes = [json.loads(line) for line in text.splitlines()]
    # (Scrapy's HTTP client refuses a URL with userinfo: the start page ends fatal/ValueError)
    assert outcomes and outcomes[-1]["final"]
    assert "s3cretpw" not in text and "alice" not in text
    assert all(o["url"].startswith("http://***@shop1.example.test:") for o in outcomes), outcomes[0]
