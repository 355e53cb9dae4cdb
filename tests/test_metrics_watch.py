"""`scrapy scale watch` and the numbers `scrapy scale status` adds: read from the backend
(the frontier's status and the snapshots the workers publish next to it) while a real
crawl runs, on SQLite and on Redis."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from scrapy_scale.monitor import watch, worker_status
from scrapy_scale.monitor.progress import RateWindow
from scrapy_scale.testbed import Testbed
from tests.crawling import start_crawl
from tests.prom_services import wait_for
from tests.test_commands import scale, status_json


def doc(worker: str, until: float, **kw: object) -> dict[str, object]:
    d: dict[str, object] = {
        "worker": worker,
        "until": until,
        "requests": {"ok": 10, "blocked": 2},
        "retries": {"blocked": 4},
        "items_stored": 9,
        "items_dead_lettered": 1,
        "pages_per_min": 60.0,
        "items_per_min": 30.0,
        "finished_per_min": 60.0,
        "domains": {
            "a.test": {"attempts": 10, "blocked": 5, "rate_limited": 0},
            "b.test": {"attempts": 10, "blocked": 1, "rate_limited": 3},
        },
        "egress_pool": {"healthy": 3},
        "browser_contexts": 2,
        "download_slots": 2,
    }
    d.update(kw)
    return d


@pytest.mark.pure
def test_merge_sums_the_workers_that_are_still_valid() -> None:
    docs = [doc("w1", 100), doc("w2", 100, egress_pool={"quarantined": 1}), doc("gone", 10)]
    m = worker_status.merge(worker_status.valid(docs, now=50))
    assert sorted(m["workers"]) == ["w1", "w2"]
    assert m["requests"] == {"ok": 20, "blocked": 4} and m["items_stored"] == 18
    assert m["pages_per_min"] == 120 and m["egress_pool"] == {"healthy": 3, "quarantined": 1}
    assert watch.top_domains(m, "blocked")[0] == ("a.test", 10, 20, 0.5)
    status = {"job": "j", "counts": {"pending": 120, "delayed": 0, "leased": 0, "done": 30, "failed": 2}}
    v = watch.view(status, docs, now=50)
    assert v["eta"] == pytest.approx(60)  # 120 left at the workers' 120 finished/min
    lines = watch.text_lines(v)
    assert lines[0] == "progress: 30 done, 2 failed, 120 pending; 120 pages/min, 60 items/min; ETA 1 min"
    assert any(line.startswith("top domains by block rate: a.test 50% (10/20)") for line in lines)
    assert any(line.startswith("top domains by rate limiting: b.test 30% (6/20)") for line in lines)
    assert "egress pool: healthy 3, quarantined 1" in lines


@pytest.mark.pure
def test_the_job_rate_comes_from_the_frontier_between_refreshes() -> None:
    rate = RateWindow()
    rate.add(0.0, 0)
    rate.add(10.0, 50)
    st = {"counts": {"pending": 100, "done": 50}}
    v = watch.view(st, [], rate=None, now=0)
    assert v["eta"] is None  # nobody publishes, one frontier sample: no rate yet
    assert rate.rate() == 5 and watch.view(st, [], now=0)["merged"]["workers"] == []


@pytest.mark.pure
def test_file_sink_round_trip(tmp_path: Path) -> None:
    sink = worker_status.FileSink(tmp_path / "monitor" / "job")
    sink.write("host/0", doc("host/0", 1))
    assert [d["worker"] for d in sink.read()] == ["host/0"]
    sink.remove("host/0")
    assert sink.read() == []


def _watch_a_running_crawl(tmp_path: Path, settings: dict[str, object], cmd_settings: dict[str, str], job: str) -> None:
    with Testbed(hosts=2, pages=40, faults="403@2:/item/*,p=0.5,sticky=True") as tb:
        crawl = dict(settings, SCALE_JOB=job, SCALE_WATCH_INTERVAL=0.5, SCALE_FRONTIER_WAIT_FOR_SEEDS=True)
        proc = start_crawl(tb, crawl, tmp_path)
        sink = worker_status.sink_for(dict(settings, SCALE_STATE_DIR=str(tmp_path / "state")), job)
        try:

            def published() -> bool:
                docs = sink.read()
                return bool(docs) and docs[0]["requests"].get("ok", 0) > 20 and bool(docs[0]["domains"])

            wait_for(published, 120, "the worker's snapshot with requests and domains")
            st = status_json(job, cmd_settings)
            assert st["progress"]["workers"] == [sink.read()[0]["worker"]]
            assert st["progress"]["requests"]["ok"] > 20
            text = scale("status", job, settings=cmd_settings)
            assert text.returncode == 0, text.stderr
            assert "progress: " in text.stdout and " pages/min, " in text.stdout, text.stdout
            assert "workers publishing: 1" in text.stdout
            wait_for(
                lambda: (
                    "top domains by block rate: shop2.example.test"
                    in scale("status", job, settings=cmd_settings).stdout
                ),
                120,
                "shop2's blocks in status",
            )
            live = scale("watch", job, "--count", "2", "--interval", "0.2", settings=cmd_settings)
            assert live.returncode == 0, live.stderr
            out = live.stdout
            assert out.count("frontier (job-wide)") == 2, out
            assert "requests by class" in out and "top domains by block rate" in out, out
        finally:
            proc.send_signal(signal.SIGINT)
            res = proc.finish(120)
        assert res.returncode == 0, res.tail()
        assert sink.read() == [], "the worker removes its snapshot at close"
        sink.close()


@pytest.mark.crawl
def test_watch_and_status_read_a_running_crawl_on_sqlite(tmp_path: Path) -> None:
    _watch_a_running_crawl(tmp_path, {}, {"SCALE_STATE_DIR": str(tmp_path / "state")}, "watched")


@pytest.mark.crawl
def test_watch_and_status_read_a_running_crawl_on_redis(tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    _watch_a_running_crawl(tmp_path, {"SCALE_FRONTIER_URL": redis_url}, {"SCALE_FRONTIER_URL": redis_url}, redis_prefix)
