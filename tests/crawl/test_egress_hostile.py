"""Hostile egress state: what is read back from egress.db or the Redis hashes is
untrusted input. A bad value is skipped or clamped with one warning; the crawl goes on
and says why. Commands that only read state never open the egress source."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from scrapy_scale.egress.shared import RedisState, SqliteState
from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_commands import scale
from tests.crawl.test_egress_crawl import FAST
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl


def _ids(tb: Testbed) -> list[str]:
    return [f"127.0.0.1:{port}" for port in tb.proxy_ports.values()]


def test_a_far_future_quarantine_and_a_record_that_does_not_decode_in_egress_db(tmp_path: Path):
    """1e18 as a quarantine end made every request fail (OSError formatting it): 0 pages,
    exit 0; {"g": "x"} made spider_opened fail so the sync never ran."""
    with Testbed(hosts=1, pages=20, seed=3, proxies=[ProxySpec("p1")]) as tb:
        (a,) = _ids(tb)
        st = SqliteState(str(tmp_path / "state" / "egress.db"), "catalog")
        now = time.time()
        st.sync("old/1", {a: {"u": 1e18, "c": now - 10, "l": 1}, f"{a}|x.test": {"g": "x"}}, {}, now - 10)
        st.close()
        s = {
            "SCALE_EGRESSES": tb.proxy_urls,
            "SCALE_EGRESS_QUARANTINE_MAX": 2,
            "SCALE_RETRY_POLICY": FAST,
            "SCALE_EGRESS_SYNC": 0.2,
        }
        res = run_crawl(tb, s, tmp_path, timeout=120)
        expected = tb.detail_urls()
    assert res.returncode == 0, res.tail()
    assert res.item_urls == expected
    assert "OSError" not in res.log and "Error caught on signal handler" not in res.log, res.tail()
    assert res.log.count("is more than SCALE_EGRESS_QUARANTINE_MAX (2 s) away") == 1, res.tail()
    assert res.log.count(f"skipping health record '{a}|x.test'") == 1, res.tail()
    assert res.stats["scale/egress/state_skipped/bad_record"] >= 1
    assert res.stats["scale/egress/restored"] >= 1  # the clamped quarantine ended and its re-probe restored it
    assert res.stats["scale/egress/pool/healthy"] == 1  # the sync loop ran
    # the command shows the pool, says what it skipped, and prints no traceback
    p = scale("egress", "catalog", settings={"SCALE_STATE_DIR": str(tmp_path / "state")})
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert f"health record '{a}|x.test' skipped" in p.stderr and a in p.stdout


def test_a_non_numeric_live_field_in_redis_does_not_break_the_sync(tmp_path: Path, redis_url, redis_prefix):
    with Testbed(hosts=1, pages=20, seed=3, proxies=[ProxySpec("p1"), ProxySpec("p2")]) as tb:
        st = RedisState(redis_url, redis_prefix)
        st.r.hset(st.k_live, mapping={"ghost/1": "not a time", "ghost/2": "nan"})
        st.r.hset(st.k_health, mapping={"127.0.0.1:1|x.test": "{not json"})
        s = {
            "SCALE_JOB": redis_prefix,
            "SCALE_FRONTIER_URL": redis_url,
            "SCALE_EGRESSES": tb.proxy_urls,
            "SCALE_RETRY_POLICY": FAST,
            "SCALE_EGRESS_SYNC": 0.2,
            "DOWNLOAD_DELAY": 0.05,
        }
        res = run_crawl(tb, s, tmp_path, timeout=120)
        expected = tb.detail_urls()
        counts = st.r.hgetall(st.k_counts)
        st.close()
    assert res.returncode == 0, res.tail()
    assert res.item_urls == expected
    assert "cannot sync the pool's state" not in res.log, res.tail()
    assert res.log.count("ignoring the last sync of worker(s)") == 1, res.tail()
    assert res.log.count("skipping health record '127.0.0.1:1|x.test'") == 1, res.tail()
    assert res.stats["scale/egress/state_skipped/live"] >= 2  # read at more than one sync, warned once
    assert res.stats["scale/egress/pool/healthy"] == 2
    mine = [json.loads(v) for k, v in counts.items() if not k.startswith(b"ghost")]
    assert sum(sum(c["requests"].values()) for c in mine) >= len(expected)  # this worker's counts were shared


def test_read_only_commands_and_the_run_summary_do_not_open_the_egress_file(tmp_path: Path):
    egress_file = tmp_path / "egresses.txt"
    with Testbed(hosts=1, pages=10, seed=3, proxies=[ProxySpec("p1")]) as tb:
        egress_file.write_text("\n".join(tb.proxy_urls) + "\n")
        s = {
            "SCALE_EGRESSES": str(egress_file),
            "LOG_LEVEL": "DEBUG",
            "EXTENSIONS": {"tests.support.egress_hostile_support.RemoveEgressFile": 0},
        }
        res = run_crawl(tb, s, tmp_path, timeout=120)
        expected = tb.detail_urls()
    assert res.returncode == 0, res.tail()
    assert res.stats["test/egress_file_removed"] == 1 and not egress_file.exists()
    assert res.item_urls == expected
    assert "run summary: frontier status unavailable" not in res.log, res.tail()
    cmd = {"SCALE_STATE_DIR": str(tmp_path / "state"), "SCALE_EGRESSES": str(egress_file)}
    for sub in ("status", "egress"):
        p = scale(sub, "catalog", settings=cmd)
        assert p.returncode == 0, (sub, p.stderr)
        assert "egress" in p.stdout


def test_a_provider_whose_first_fetch_hangs_does_not_stop_the_crawl_at_start(tmp_path: Path):
    with Testbed(hosts=1, pages=10, seed=3, proxies=[ProxySpec("p1")]) as tb:
        s = {
            "SCALE_EGRESSES": "tests.support.egress_hostile_support.HangingProvider",
            "TEST_PROXIES": tb.proxy_urls,
            "SCALE_EGRESS_PROVIDER_TIMEOUT": 1,
        }
        res = run_crawl(tb, s, tmp_path, timeout=120)
        expected = tb.detail_urls()
    assert res.returncode == 0, res.tail()
    assert res.item_urls == expected
    # the crawl started without the provider: a request waited for the empty pool, and that
    # (not the provider's own deadline) is what let the first fetch() return
    assert res.stats["test/provider_released_by_progress"] == 1, res.tail()
    assert res.log.count("the provider's first fetch() has not returned after 1 s") == 1
    assert res.log.index("has not returned after 1 s") < res.log.index("egress: pool now 1 egress(es)")


@pytest.mark.parametrize("exhausted", ["wait", "close"])
def test_a_provider_whose_fetch_never_returns_ends_the_crawl_with_an_error(tmp_path: Path, exhausted: str):
    """fetch() ran in the reactor's thread pool, which the reactor joins at shutdown, and
    the empty pool waited forever: the process never ended. Now the crawl gives up after
    10 x SCALE_EGRESS_PROVIDER_TIMEOUT (one with SCALE_EGRESS_EXHAUSTED = close), says why,
    exits 1, and the hung thread does not hold the exit."""
    with Testbed(hosts=1, pages=10, seed=3, proxies=[ProxySpec("p1")]) as tb:
        s = {
            "SCALE_EGRESSES": "tests.support.egress_hostile_support.BlockedProvider",
            "SCALE_EGRESS_PROVIDER_TIMEOUT": 0.5,
            "SCALE_EGRESS_EXHAUSTED": exhausted,
        }
        res = run_crawl(tb, s, tmp_path, timeout=90)
    assert res.stats.get("test/blocked_provider_calls") == 1, res.tail()  # one call at a time: it never returned
    assert res.stats.get("finish_reason") == "egress_unavailable", res.tail()
    assert res.returncode == 1, res.tail()
    assert res.items == []
    rule = "SCALE_EGRESS_EXHAUSTED = close" if exhausted == "close" else "10 x SCALE_EGRESS_PROVIDER_TIMEOUT (0.5 s)"
    line = next(ln for ln in res.log.splitlines() if "closing the spider (reason egress_unavailable)" in ln)
    assert rule in line and "the provider's fetch() has not returned for" in line, line
    waited = float(line.split("has had no egress for ")[1].split(" s")[0])
    assert waited >= (0.5 if exhausted == "close" else 5), line
    assert res.log.count("closing the spider (reason egress_unavailable)") == 1, res.tail()


def test_the_commands_clamp_a_far_quarantine_as_the_crawl_does(tmp_path: Path):
    """report.clean_health decoded records without now/longest: `scrapy scale egress` and
    `status` showed "quarantined until 2058" while the crawl clamps it to now + max."""
    a, b = "127.0.0.1:1", "127.0.0.1:2"
    st = SqliteState(str(tmp_path / "state" / "egress.db"), "catalog")
    now = time.time()
    st.sync("old/1", {a: {"u": now + 1e9, "c": now - 10, "l": 1}, b: {"u": now + 30, "c": now - 10, "l": 1}}, {}, now)
    st.close()
    cmd = {"SCALE_STATE_DIR": str(tmp_path / "state"), "SCALE_EGRESS_QUARANTINE_MAX": "60"}
    p = scale("egress", "catalog", "--json", settings=cmd)
    t1 = time.time()
    assert p.returncode == 0, p.stderr
    rows = {r["egress"]: r for r in json.loads(p.stdout)}
    assert now + 59 <= rows[a]["until"] <= t1 + 60, rows[a]  # clamped to now + SCALE_EGRESS_QUARANTINE_MAX
    assert rows[b]["until"] == now + 30  # a near end is left alone
    assert p.stderr.count("warning") == 1 and f"health record '{a}': its quarantine end" in p.stderr, p.stderr
    assert f"'{b}'" not in p.stderr
    s = scale("egress", "catalog", settings=cmd)  # the text rows (status prints the same ones)
    assert s.returncode == 0, s.stderr
    line = next(ln for ln in s.stdout.splitlines() if a in ln)
    assert time.strftime("%Y", time.localtime(now + 1e9)) not in line and "until" in line, line
