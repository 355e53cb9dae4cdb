"""The metrics: the subscriber counts what the stats count, bounded per-domain series,
the export settings and their failure modes, the progress arithmetic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from scrapy_scale import config
from scrapy_scale.config import ScaleSettingError
from scrapy_scale.errors import ItemDeadLettered
from scrapy_scale.monitor import settings as S
from scrapy_scale.monitor.domains import OTHER, TopDomains
from scrapy_scale.monitor.export import FileSD, write_textfile
from scrapy_scale.monitor.extension import MetricsExtension
from scrapy_scale.monitor.metrics import CrawlMetrics
from scrapy_scale.monitor.progress import RateWindow, eta_seconds, format_eta, progress_line
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.outcomes.stats import OutcomeStats

pytestmark = pytest.mark.pure

C = FailureClass


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, labels without job/spider/worker): value} of a text exposition."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("job", "spider", "worker")))
            out[(s.name, labels)] = s.value
    return out


def by_label(smp: dict, name: str, label: str) -> dict[str, float]:
    return {dict(lab)[label]: v for (n, lab), v in smp.items() if n == name}


def outcomes_sequence() -> list[Outcome]:
    o = []
    for i in range(5):
        o.append(Outcome(f"f{i}", f"http://a.test/{i}", "a.test", C.OK))
    o.append(Outcome("r1", "http://b.test/1", "b.test", C.TRANSIENT, attempt=1, final=False, retry_at=1.0))
    o.append(
        Outcome(
            "r1", "http://b.test/1", "b.test", C.TRANSIENT, attempt=2, final=True, gave_up=True, gave_up_why="budget"
        )
    )
    o.append(Outcome("r2", "http://b.test/2", "b.test", C.RATE_LIMITED, attempt=1, final=False, retry_at=1.0))
    o.append(Outcome("r2", "http://b.test/2", "b.test", C.OK, attempt=2))
    o.append(Outcome("r3", "http://c.test/3", "c.test", C.BLOCKED, attempt=1, final=False, egress="p1:1"))
    o.append(Outcome("r3", "http://c.test/3", "c.test", C.OK, attempt=2, egress="p2:1"))
    o.append(Outcome("n", "http://c.test/x", "c.test", C.NOT_FOUND))
    o.append(Outcome("rb", "http://c.test/robots.txt", "c.test", C.OK, internal=True))
    return o


def test_the_subscriber_counts_exactly_what_the_stats_count() -> None:
    crawler = get_crawler()
    crawler.stats.open_spider()
    stats = OutcomeStats(crawler)
    m = CrawlMetrics("j", "s", "w")
    for o in outcomes_sequence():
        stats.on_outcome(o)
        m.on_outcome(o)
    st = crawler.stats.get_stats()
    smp = samples(_text(m))
    for cls in C:
        assert by_label(smp, "scrapy_scale_requests_total", "class").get(cls.value, 0) == st.get(
            f"scale/outcome/{cls.value}", 0
        )
        assert by_label(smp, "scrapy_scale_retries_total", "class").get(cls.value, 0) == st.get(
            f"scale/retry/{cls.value}", 0
        )
        assert by_label(smp, "scrapy_scale_gave_up_total", "class").get(cls.value, 0) == st.get(
            f"scale/gave_up/{cls.value}", 0
        )
    buckets = by_label(smp, "scrapy_scale_request_attempts_bucket", "le")
    assert buckets["1"] == st["scale/retry_depth/1"] == 6
    assert buckets["2"] - buckets["1"] == st["scale/retry_depth/2"] == 3
    assert smp[("scrapy_scale_request_attempts_count", ())] == 9  # robots.txt (internal) not counted
    assert smp[("scrapy_scale_egress_attempts_total", ())] == 2
    assert by_label(smp, "scrapy_scale_egress_failures_total", "class") == {"blocked": 1.0}


def test_every_sample_carries_job_spider_worker_and_names_follow_the_conventions() -> None:
    m = CrawlMetrics("catalog", "catalog", "host/0")
    for o in outcomes_sequence():
        m.on_outcome(o)
    m.set_frontier(
        {"counts": {"pending": 3, "done": 9}, "oldest_pending_age": None, "average_wait": 0.5, "dead_letters": 0}
    )
    for fam in text_string_to_metric_families(_text(m)):
        assert fam.name.startswith("scrapy_scale_")
        for s in fam.samples:
            assert {"job": "catalog", "spider": "catalog", "worker": "host/0"}.items() <= s.labels.items()
            if fam.type == "counter":
                assert s.name.endswith("_total")
    smp = samples(_text(m))
    assert by_label(smp, "scrapy_scale_queue_requests", "state") == {
        "pending": 3,
        "delayed": 0,
        "leased": 0,
        "done": 9,
        "failed": 0,
    }
    assert smp[("scrapy_scale_queue_oldest_pending_age_seconds", ())] == 0  # nothing pending: 0, not absent


def test_dead_lettered_items_are_counted_from_the_item_signals() -> None:
    m = CrawlMetrics("j", "s", "w")
    m.on_item_stored(item={})
    m.on_item_failed(exception=ItemDeadLettered("too large"))  # item_dropped
    m.on_item_failed(exception=ValueError("a plain drop"))
    smp = samples(_text(m))
    assert smp[("scrapy_scale_items_stored_total", ())] == 1
    assert smp[("scrapy_scale_items_dead_lettered_total", ())] == 1


def test_quality_series_appear_only_when_the_quality_layer_counts() -> None:
    m = CrawlMetrics("j", "s", "w")
    assert not any(n.startswith(("scrapy_scale_items_validated", "scrapy_scale_quality")) for n, _ in samples(_text(m)))
    m.items_validated, m.items_quarantined, m.quality_checks_failing = 40, 10, 2
    smp = samples(_text(m))
    assert smp[("scrapy_scale_items_validated_total", ())] == 40
    assert smp[("scrapy_scale_items_quarantined_total", ())] == 10
    assert smp[("scrapy_scale_quality_checks_failing", ())] == 2


def _text(m: CrawlMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(m.registry()).decode()


def test_per_domain_series_stay_bounded_over_50000_domains() -> None:
    top = TopDomains(20)
    m = CrawlMetrics("j", "s", "w", top_domains=20)
    m.domains = top
    total = 0
    for round_ in range(3):
        for i in range(50_000):
            domain = f"d{i}.test"
            n = 50 if i < 30 else 1  # 30 busy domains
            for _ in range(n if round_ == 0 else 1):
                m.on_outcome(Outcome("x", "http://" + domain, domain, C.OK))
                total += 1
        m.refresh_domains()
    attempts = by_label(samples(_text(m)), "scrapy_scale_domain_attempts_total", "domain")
    assert len(attempts) <= 21 and OTHER in attempts
    assert sum(attempts.values()) == total  # nothing lost, nothing counted twice
    assert set(attempts) - {OTHER} <= {f"d{i}.test" for i in range(30)}  # the named ones are busy ones
    assert top.counted <= top.cap


def test_a_named_domain_keeps_its_series_and_counters_never_decrease() -> None:
    top = TopDomains(1)
    assert top.label("a") == OTHER
    assert top.refresh() == ["a"]
    assert top.label("a") == "a"
    for _ in range(10):
        top.label("b")
    assert top.refresh() == []  # no slot left: b stays other however busy
    assert top.label("a") == "a" and top.label("b") == OTHER


@pytest.mark.parametrize(
    "value,parsed",
    [(0, (0, 0)), ("0", (0, 0)), (9410, (9410, 9410)), ("9410-9430", (9410, 9430)), (" 9410 - 9411 ", (9410, 9411))],
)
def test_metrics_port_accepts_a_port_a_range_or_zero(value, parsed) -> None:  # type: ignore[no-untyped-def]
    assert S.PORT.get({"SCALE_METRICS_PORT": value}) == parsed


@pytest.mark.parametrize("value", ["9430-9410", "http", "70000", "0-10", True])
def test_a_bad_metrics_port_names_the_setting(value) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ScaleSettingError, match="^SCALE_METRICS_PORT: "):
        config.validate_all({"SCALE_METRICS_PORT": value})


def test_without_an_export_mode_the_extension_is_not_configured_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """No export mode is the usual case: Scrapy's extension manager must not log a WARNING
    "Disabled MetricsExtension: ..." in every crawl; the reason is a DEBUG line."""
    import logging

    from scrapy.extension import ExtensionManager

    with pytest.raises(NotConfigured):
        MetricsExtension.from_crawler(get_crawler())
    crawler = get_crawler(settings_dict={"EXTENSIONS": {MetricsExtension: 0}, "EXTENSIONS_BASE": {}})
    with caplog.at_level(logging.DEBUG):
        ExtensionManager.from_crawler(crawler)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert [r for r in caplog.records if r.levelno == logging.DEBUG and "no metrics export mode" in r.getMessage()]


@pytest.mark.parametrize("name", ["SCALE_PROGRESS_INTERVAL", "SCALE_WATCH_INTERVAL"])
def test_an_interval_of_0_means_none(name: str) -> None:
    """README: SCALE_PROGRESS_INTERVAL / SCALE_WATCH_INTERVAL "`0` = none": the extension
    is not configured (as from settings.py, or as `-s NAME=0` gives it); by default it is."""
    from scrapy_scale.monitor.progress import ProgressLog
    from scrapy_scale.monitor.worker_status import SnapshotPublisher

    ext = {"SCALE_PROGRESS_INTERVAL": ProgressLog, "SCALE_WATCH_INTERVAL": SnapshotPublisher}[name]
    for off in (0, 0.0, "0"):
        with pytest.raises(NotConfigured, match=f"^{name} = 0$"):
            ext.from_crawler(get_crawler(settings_dict={name: off}))
    on = ext.from_crawler(get_crawler())
    assert on.interval == config.REGISTRY[name].default


def test_file_sd_files_of_dead_processes_are_removed(tmp_path: Path) -> None:
    dead = FileSD(tmp_path, "job", pid=_dead_pid(), hostname="h")
    dead.write("127.0.0.1:1", {})
    other_host = FileSD(tmp_path, "job", pid=_dead_pid(), hostname="elsewhere")
    other_host.write("10.0.0.1:1", {})
    me = FileSD(tmp_path, "job", hostname="h")
    me.write("127.0.0.1:2", {"scale_job": "job"})
    assert not dead.path.exists()  # a pid of this host that is gone
    assert other_host.path.exists()  # another host's pids say nothing here
    assert json.loads(me.path.read_text()) == [{"targets": ["127.0.0.1:2"], "labels": {"scale_job": "job"}}]
    me.remove()
    assert not me.path.exists()


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_textfile_is_the_exposition_format(tmp_path: Path) -> None:
    m = CrawlMetrics("j", "s", "w")
    m.on_outcome(Outcome("x", "http://a.test/", "a.test", C.OK))
    write_textfile(m.registry(), str(tmp_path / "sub" / "m.prom"))
    smp = samples((tmp_path / "sub" / "m.prom").read_text())
    assert by_label(smp, "scrapy_scale_requests_total", "class")["ok"] == 1


def test_rates_and_eta_from_recent_samples() -> None:
    w = RateWindow(window=60)
    assert w.rate() is None
    w.add(0, 0)
    w.add(10, 100)
    assert w.rate() == 10
    for t in range(20, 200, 10):
        w.add(t, 100 + (t - 10) * 2)  # slows to 2/s
    assert w.rate() == pytest.approx(2)  # old samples fall out of the window
    assert eta_seconds(120, 2.0) == 60
    assert eta_seconds(0, None) == 0
    assert eta_seconds(5, 0.0) is None
    assert eta_seconds(5, 0.0, 30.0) is None  # nothing done lately: unknown, not just the wait
    assert eta_seconds(5, None, 30.0) is None
    assert format_eta(90) == "2 min" and format_eta(None) == "unknown" and format_eta(7200) == "2 h 0 min"


def test_progress_line_says_done_pending_failed_rates_and_eta() -> None:
    counts = {"done": 1234, "failed": 5, "pending": 7878, "delayed": 12, "leased": 64}
    line = progress_line(counts, 310 / 60, 280 / 60, 1500)
    assert line == (
        "1,234 done, 5 failed, 7,878 pending, 12 delayed, 64 leased; 310 pages/min, 280 items/min; ETA 25 min"
    )
    assert progress_line(None, None, None, None, done=3, failed=1) == ("3 done, 1 failed; - pages/min, - items/min")


def test_the_eta_waits_for_delayed_requests_and_paused_sites(caplog: pytest.LogCaptureFixture) -> None:
    """`ETA 12 s` with retries delayed 80 s more: the ETA is no sooner than the latest
    delayed request may go and the last pause ends; bad times from shared state are skipped
    or clamped with one warning."""
    import logging

    from scrapy_scale.monitor import progress

    now = 1_000_000.0
    st = {"last_eligible_at": now + 83}
    assert progress.waiting(st, [], now) == 83
    assert progress.waiting(st, [now + 120], now) == 120  # a site paused longer
    assert eta_seconds(24, 2.0, progress.waiting(st, [], now)) == 83  # not 12 s
    assert eta_seconds(1000, 2.0, 83) == 500  # the work itself takes longer
    assert eta_seconds(5, None, 83) is None and eta_seconds(5, None, 0) is None  # no rate: unknown
    assert eta_seconds(0, 2.0, 83) == 0
    progress._warned_wait = False
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.monitor.progress"):
        assert progress.waiting({"last_eligible_at": 10**400}, [float("inf"), "x", float("nan")], now) == 0  # type: ignore[list-item]
        far = progress.waiting({"last_eligible_at": now + 1e12}, [], now)
    assert far == progress.WAIT_MAX
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_progress_line_tells_retries_from_requests_held_by_pacing_and_paused_sites() -> None:
    counts = {"done": 92, "failed": 0, "pending": 0, "delayed": 66, "leased": 2}
    line = progress_line(counts, 1.0, 1.0, 83, retries=34, paused=2)
    # issue 31: `72 pending (72 delayed: ...)` under a table saying `pending 0`: one word, two
    # meanings; pending is the state `status` counts, the delayed are not in it
    assert "0 pending, 66 delayed (34 retry backoff, 32 held by pacing), 2 leased, 2 sites paused;" in line, line
    assert line.endswith("ETA 1 min"), line
