"""Prometheus export against real crawls: a real Prometheus server (Debian package
``prometheus``) scraping testbed crawls found through a file_sd folder, and
``promtool check metrics`` on a scrape taken mid-crawl.

No fixed sleeps: every wait is for a condition (a target up, a series with a value).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scrapy_scale.testbed import Testbed
from tests.support.crawling import UNPACED, start_crawl
from tests.support.prom_services import Prometheus, Pushgateway, http_get, promtool, sd_targets, wait_for

pytestmark = pytest.mark.crawl

FAULTS = "429:/item/*,p=0.1,retry_after=1; 500:/item/*,p=0.1; 403:/item/*,p=0.05; 404@1:/item/7"
CLASSES = ("ok", "not_found", "transient", "rate_limited", "blocked", "egress_failed", "parse_failed", "fatal")


def metrics_settings(sd: Path, **extra: object) -> dict[str, object]:
    s: dict[str, object] = {
        "SCALE_METRICS_PORT": 0,
        "SCALE_METRICS_FILE_SD": str(sd),
        "SCALE_METRICS_INTERVAL": 0.5,
        # the crawl stays open once drained, so the final numbers can be scraped; the test
        # then stops it (SIGINT) to get its stats
        "SCALE_FRONTIER_WAIT_FOR_SEEDS": True,
        **UNPACED,  # pacing is not under test here
    }
    s.update(extra)
    return s


def stop(proc, timeout: float = 120):  # type: ignore[no-untyped-def]
    proc.send_signal(signal.SIGINT)
    return proc.finish(timeout)


def test_prometheus_scrapes_a_faulty_crawl_and_its_numbers_match_the_stats(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    with Testbed(hosts=3, pages=60, faults=FAULTS, seed=3) as tb, Prometheus(tmp_path / "prom", sd) as prom:
        proc = start_crawl(tb, metrics_settings(sd, SCALE_JOB="promjob"), tmp_path)
        try:
            job = '{job="promjob"}'
            wait_for(
                lambda: prom.value(f"scrapy_scale_start_time_seconds{job}"),
                90,
                "Prometheus finds the crawl through file_sd and scrapes it",
            )

            def drained() -> bool:
                q = prom.by(f"scrapy_scale_queue_requests{job}", "state")
                total = prom.value(f"sum(scrapy_scale_requests_total{job})")
                left = q.get("pending", 1) + q.get("delayed", 1) + q.get("leased", 1)
                finished = q.get("done", 0) + q.get("failed", 0)
                return bool(q) and left == 0 and finished > 0 and total == finished

            wait_for(drained, 180, "the crawl drained, as Prometheus sees it")
            # the last scrape after the drain holds the final numbers
            items = wait_for(lambda: prom.value(f"scrapy_scale_items_stored_total{job}"), 30, "items stored")
            seen = {
                "requests": prom.by(f"scrapy_scale_requests_total{job}", "class"),
                "retries": prom.by(f"scrapy_scale_retries_total{job}", "class"),
                "gave_up": prom.by(f"scrapy_scale_gave_up_total{job}", "class"),
                "depth_count": prom.value(f"scrapy_scale_request_attempts_count{job}"),
                "depth_le1": prom.value('scrapy_scale_request_attempts_bucket{job="promjob",le="1"}'),
                "blocked": prom.value(f"sum(scrapy_scale_domain_blocked_total{job})"),
                "rate_limited": prom.value(f"sum(scrapy_scale_domain_rate_limited_total{job})"),
            }
        finally:
            res = stop(proc)
    st = res.stats
    assert res.returncode == 0, res.tail()
    for cls in CLASSES:
        assert seen["requests"].get(cls, 0) == st.get(f"scale/outcome/{cls}", 0), cls
        assert seen["retries"].get(cls, 0) == st.get(f"scale/retry/{cls}", 0), cls
        assert seen["gave_up"].get(cls, 0) == st.get(f"scale/gave_up/{cls}", 0), cls
    # the faults happened, so the comparison above is not of zeros
    assert st.get("scale/retry/rate_limited") and st.get("scale/retry/transient") and st.get("scale/retry/blocked")
    assert st.get("scale/outcome/not_found") == 1
    assert items == st["item_scraped_count"] > 0
    depth = {int(k.rsplit("/", 1)[1]): v for k, v in st.items() if k.startswith("scale/retry_depth/")}
    assert seen["depth_count"] == sum(depth.values())
    assert seen["depth_le1"] == depth.get(1, 0)
    attempts_blocked = st.get("scale/retry/blocked", 0) + st.get("scale/outcome/blocked", 0)
    attempts_429 = st.get("scale/retry/rate_limited", 0) + st.get("scale/outcome/rate_limited", 0)
    assert seen["blocked"] == attempts_blocked
    assert seen["rate_limited"] == attempts_429


@pytest.mark.serial
def test_two_crawls_on_one_host_with_a_port_range_are_both_scraped(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    settings = metrics_settings(sd, SCALE_METRICS_PORT="9410-9430")
    with Testbed(hosts=2, pages=30) as tb, Prometheus(tmp_path / "prom", sd) as prom:
        a = start_crawl(tb, dict(settings, SCALE_JOB="twin-a"), tmp_path)
        b = start_crawl(tb, dict(settings, SCALE_JOB="twin-b"), tmp_path)
        try:

            def both() -> dict[str, str]:
                res = prom.query("scrapy_scale_start_time_seconds")
                found = {r["metric"]["job"]: r["metric"]["instance"] for r in res}
                return found if {"twin-a", "twin-b"} <= set(found) else {}

            found = wait_for(both, 120, "both crawls scraped")
            ports = {int(found[j].rsplit(":", 1)[1]) for j in ("twin-a", "twin-b")}
            assert len(ports) == 2 and all(9410 <= p <= 9430 for p in ports), found
            for job in ("twin-a", "twin-b"):
                wait_for(
                    lambda j=job: prom.value(f'scrapy_scale_requests_total{{job="{j}",class="ok"}}'),
                    120,
                    f"{job}'s requests",
                )
            up = {t["labels"]["instance"]: t["health"] for t in prom.targets()}
            assert sorted(up) == sorted(found.values()) and set(up.values()) == {"up"}, up
        finally:
            ra, rb = stop(a), stop(b)
    assert ra.returncode == 0, ra.tail()
    assert rb.returncode == 0, rb.tail()
    assert not list(sd.glob("*.json")), "each crawl removes its file_sd file at close"


def test_a_crawl_of_400_hosts_makes_a_bounded_number_of_series(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    prom_file = tmp_path / "final.prom"
    settings = metrics_settings(
        sd,
        SCALE_METRICS_TEXTFILE=str(prom_file),
        SCALE_METRICS_TOP_DOMAINS=10,
        SCALE_FRONTIER_WAIT_FOR_SEEDS=False,
        ROBOTSTXT_OBEY=False,
        CONCURRENT_REQUESTS=64,
    )
    # 400 hosts, 10 named: 36 times more domains than series (2,000 hosts took ~165 s of CI)
    with Testbed(hosts=400, pages=1, keep_log=False) as tb:
        proc = start_crawl(tb, settings, tmp_path)
        res = proc.finish(600)
    assert res.returncode == 0, res.tail()
    assert res.stats["item_scraped_count"] == 400
    series = [line for line in prom_file.read_text().splitlines() if line and not line.startswith("#")]
    per_domain = [s for s in series if s.startswith("scrapy_scale_domain_")]
    by_metric: dict[str, set[str]] = {}
    for s in per_domain:
        name = s.split("{", 1)[0]
        domain = s.split('domain="', 1)[1].split('"', 1)[0]
        by_metric.setdefault(name, set()).add(domain)
    attempts = by_metric["scrapy_scale_domain_attempts_total"]
    # at most the top 10 + other (a domain named late in a crawl of 2 pages per host may see
    # no event under its own name, so fewer than 10 can show)
    assert "other" in attempts and 2 <= len(attempts) <= 11, attempts
    assert all(len(d) <= 11 for d in by_metric.values()), by_metric
    total = sum(float(s.rsplit(" ", 1)[1]) for s in per_domain if s.startswith("scrapy_scale_domain_attempts_total"))
    assert total == res.stats["scale/outcome/ok"]  # every attempt counted once, in a named series or other
    assert len(series) < 150, len(series)


def test_promtool_check_metrics_passes_on_a_scrape_taken_mid_crawl(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    with Testbed(hosts=3, pages=60, faults=FAULTS) as tb:
        proc = start_crawl(tb, metrics_settings(sd), tmp_path)
        try:
            addr = wait_for(lambda: sd_targets(sd), 90, "the crawl's file_sd file")[0]

            def mid_crawl() -> str:
                text = http_get(f"http://{addr}/metrics")
                return text if "scrapy_scale_queue_requests" in text and 'class="ok"' in text else ""

            text = wait_for(mid_crawl, 90, "a scrape with requests and queue numbers")
        finally:
            res = stop(proc)
    assert res.returncode == 0, res.tail()
    check = promtool("check", "metrics", stdin=text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert not (check.stdout + check.stderr).strip(), check.stdout + check.stderr  # no lint warnings either


def test_pushgateway_groups_carry_the_job_id_and_are_deleted_at_close(tmp_path: Path) -> None:
    with Testbed(hosts=2, pages=20) as tb, Pushgateway(tmp_path / "pgw") as pgw:
        settings = {
            "SCALE_METRICS_PUSHGATEWAY": pgw.url,
            "SCALE_METRICS_INTERVAL": 0.5,
            "SCALE_FRONTIER_WAIT_FOR_SEEDS": True,
            "SCALE_JOB": "pushed",
        }
        proc = start_crawl(tb, settings, tmp_path, extra_args=["-a", "_job=6487ec79947edab326d6db28"])
        try:

            def group() -> dict[str, str] | None:
                return next((g for g in pgw.groups() if g.get("job") == "pushed"), None)

            g = wait_for(group, 90, "a pushed group")
            assert g["scrapyd_job"] == "6487ec79947edab326d6db28"
            assert g["spider"] == "catalog" and g["worker"]
            # a count above 0: the crawl is under way (the series exist at 0 from the first push,
            # and a SIGINT before Scrapy's engine runs stops the reactor before the spider closes)
            text = wait_for(
                lambda: (
                    (t := http_get(pgw.url + "/metrics"))
                    and any(v > 0 for _, v in pushed(t, "scrapy_scale_requests_total", job="pushed", **{"class": "ok"}))
                    and t
                ),
                90,
                "pushed request counts",
            )
            assert pushed(text, "scrapy_scale_requests_total", job="pushed", **{"class": "ok"})
        finally:
            res = stop(proc)
        assert res.returncode == 0, res.tail()
        assert not [g for g in pgw.groups() if g.get("job") == "pushed"], "the group is deleted at close"

        # without deletion, the final push stays: the crawl's final numbers
        kept = dict(settings, SCALE_METRICS_PUSH_DELETE=False, SCALE_JOB="kept", SCALE_FRONTIER_WAIT_FOR_SEEDS=False)
        res = start_crawl(tb, kept, tmp_path, extra_args=["-a", "_job=run2"]).finish(120)
        assert res.returncode == 0, res.tail()
        ok = pushed(http_get(pgw.url + "/metrics"), "scrapy_scale_requests_total", job="kept", **{"class": "ok"})
        assert len(ok) == 1 and ok[0][0]["scrapyd_job"] == "run2", ok
        assert ok[0][1] == res.stats["scale/outcome/ok"]


def test_a_second_ctrl_c_still_deletes_the_pushed_group(tmp_path: Path) -> None:
    """The reactor stops without the spider closing (a second Ctrl-C while the first one's
    clean stop waits for a download that hangs): spider_closed never runs, and the group
    was left on the Pushgateway with the crawl's last numbers. The reactor's shutdown now
    writes the final push and deletes it."""
    with Testbed(hosts=2, pages=40, seed=6, faults="hang@1:/item/3") as tb, Pushgateway(tmp_path / "pgw") as pgw:
        settings = {
            "SCALE_METRICS_PUSHGATEWAY": pgw.url,
            "SCALE_METRICS_INTERVAL": 0.5,
            "SCALE_JOB": "forced",
            "DOWNLOAD_TIMEOUT": 600,
            **UNPACED,
        }
        proc = start_crawl(tb, settings, tmp_path)
        try:

            def ok_pushed() -> bool:
                text = http_get(pgw.url + "/metrics") or ""
                samples = pushed(text, "scrapy_scale_requests_total", job="forced", **{"class": "ok"})
                return any(v > 0 for _, v in samples)

            wait_for(
                lambda: any(r.kind == "hang" for r in tb.log) and ok_pushed(), 90, "pages pushed, the hang asked for"
            )
            assert [g for g in pgw.groups() if g.get("job") == "forced"]
            proc.send_signal(signal.SIGINT)
            wait_for(lambda: "shutting down gracefully" in proc.result().log, 30, "the first Ctrl-C")
            proc.send_signal(signal.SIGINT)
            res = proc.finish(60)
        finally:
            if proc.poll() is None:
                proc.kill()
        left = [g for g in pgw.groups() if g.get("job") == "forced"]
    assert "forcing unclean shutdown" in res.log, res.tail()
    assert "Spider closed" not in res.log, res.tail()  # the path under test: spider_closed never ran
    assert "metrics: final export at shutdown failed" not in res.log
    assert left == [], "the group is deleted at the reactor's shutdown"


def pushed(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Samples of ``name`` whose labels include ``labels``, from a Pushgateway's /metrics."""
    return [
        (s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]
