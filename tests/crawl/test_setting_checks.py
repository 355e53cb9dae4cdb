"""Settings checked at startup (each bad value stops the crawl naming the setting, never its password), and a
child request that copied its parent's meta starting a chain of its own on the frontier."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.crawl


def test_an_unreachable_redis_frontier_does_not_log_a_query_password():
    """redis-py takes the password from ``?password=`` too; the error must not show it."""
    from scrapy_scale.frontier.backends import open_store
    from scrapy_scale.frontier.store import FrontierError

    with pytest.raises(FrontierError) as e:
        open_store("redis://127.0.0.1:1/0?password=s3cret", "job")
    assert "s3cret" not in str(e.value)
    assert "127.0.0.1:1" in str(e.value)


def test_a_request_that_copied_response_meta_starts_its_own_chain_on_the_frontier(tmp_path):
    """With the frontier (the add-on's scheduler), a child request built with
    ``meta=dict(response.meta)`` must not inherit its parent's attempt count, not-before
    and last failure: it is a new request, with its whole retry budget (the outcome
    middleware resets those keys itself only when the scheduler is not the frontier)."""
    import json

    from scrapy_scale.testbed import Testbed
    from tests.support.crawling import run_crawl

    log = tmp_path / "outcomes.jsonl"
    settings = {
        "SPIDER_MODULES": ["tests.support.chain_spiders"],
        "SCALE_OUTCOME_LOG": str(log),
        "SCALE_RETRY_POLICY": {"transient": {"base": 0.1, "cap": 0.2}},
    }
    with Testbed(hosts=1, pages=5, seed=1, faults="500@1:/item/1,first=1") as tb:
        res = run_crawl(tb, settings, tmp_path, spider="copy_meta", timeout=60)
    assert res.returncode == 0, res.tail()
    finals = {o["url"].rsplit("/", 2)[-1]: o for o in map(json.loads, log.read_text().splitlines()) if o["final"]}
    assert finals["1"]["attempt"] == 2  # the parent was retried once
    assert finals["2"]["cls"] == "ok"
    assert finals["2"]["attempt"] == 1, finals["2"]
    assert res.stats["scale/retry_depth/1"] == 1 and res.stats["scale/retry_depth/2"] == 1
