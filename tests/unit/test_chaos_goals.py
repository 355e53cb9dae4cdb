"""The real plan's figures from an nginx access log, and its goals (benchmarks/chaos_goals.py):
the benchmark's verdicts are only as true as these sums."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.chaos_goals import HostPlan, goals, site_figures

pytestmark = pytest.mark.pure

A = HostPlan("127.0.1.1", limit=2.0, limit_status=429)
D = HostPlan("127.0.1.4", limit=1.0, crawl_delay=1.0)


def req(host: HostPlan, t: float, status: int = 200, path: str = "/item/1.html") -> dict[str, Any]:
    return {"client": "127.0.2.1", "t": t, "host": host.addr, "status": status, "path": path}


def test_site_figures_count_what_nginx_logged_while_each_host_had_work() -> None:
    served = [
        req(A, 0.0, path="/robots.txt"),  # robots.txt opens no host's work
        req(A, 1.0),
        req(A, 1.5),
        req(A, 2.0),
        req(A, 2.2, 429),
        req(A, 2.5),
        req(D, 0.5, path="/robots.txt"),
        req(D, 2.2),
        req(D, 1.0),  # out of order in the log: sorted by $msec
        req(D, 3.0, 503),
    ]
    f = site_figures(served, [A, D])
    assert (f["site_requests"], f["site_429s"], f["site_refusals"], f["site_503s"]) == (10, 1, 1, 1)
    assert f["site_429s_by_host"] == {A.addr: 1, D.addr: 0}
    # A: 4 ok from 1.0 to 2.5, the last one taking 1/2 s: 4 in 2 s at 2/s, all of its limit;
    # D: 2 ok from 1.0 to 2.2 (+1 s) at 1/s: 2 of 2.2; together 6 of 6.2
    assert f["busy_share_by_host"] == {A.addr: pytest.approx(1.0), D.addr: pytest.approx(2 / 2.2)}
    assert f["busy_share"] == pytest.approx(6 / 6.2)
    assert f["cd_min_gap"] == pytest.approx(0.8)  # 3.0 - 2.2: robots.txt aside, refused answers too


def row(stack: str, rnd: int, pages: int, share: float, per_min: float, **kw: Any) -> dict[str, Any]:
    base = {
        "stack": stack,
        "round": rnd,
        "pages": pages,
        "share": share,
        "per_min": per_min,
        "req_per_page": 1.1,
        "site_requests": pages,
        "site_429s": 0,
        "busy_share": 0.8,
        "cd_min_gap": 1.1,
        "self_answering": {"tp-dead": (3, 5)},
    }
    return {**base, **kw}


def test_goals_take_the_worst_run_where_every_run_counts_and_the_strongest_scrapy_stack() -> None:
    rows = [
        row("scrapy defaults", 0, 100, 0.2, 50.0),
        row("scrapy tuned", 0, 300, 0.6, 200.0),
        row("addon", 0, 500, 1.0, 400.0, site_429s=10),
        row("addon", 1, 490, 0.98, 380.0, cd_min_gap=0.9, self_answering={"tp-dead": (6, 5)}),
    ]
    by = {
        g.name.split(" (")[0].split(",")[0]: g
        for g in goals(rows, "addon", ["scrapy defaults", "scrapy tuned"], 1.0, 3)
    }
    assert not by["pages crawled"].held and by["pages crawled"].value == "98.0%"  # one run at 98% misses
    ratio = by["pages/min vs the strongest Scrapy stack"]
    assert "scrapy tuned" in ratio.name
    assert ratio.value == "1.95x" and ratio.held  # the median 390 against the tuned stack's 200, not 50
    assert by["429s a page"].value == "0.010" and by["429s a page"].held  # median of 10/500 and 0/490
    assert not by["Crawl-delay host"].held  # 0.9 s in one run
    proxy = [g for g in goals(rows, "addon", ["scrapy tuned"], 1.0, 3) if g.name.startswith("proxy")]
    assert [g.held for g in proxy] == [True, False]
