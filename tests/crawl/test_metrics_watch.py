"""`scrapy scale watch` and the numbers `scrapy scale status` adds: read from the backend
(the frontier's status and the snapshots the workers publish next to it) while a real
crawl runs, on SQLite and on Redis."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from scrapy_scale.monitor import worker_status
from scrapy_scale.testbed import Testbed
from tests.crawl.test_commands import scale, status_json
from tests.support.crawling import start_crawl
from tests.support.prom_services import wait_for

pytestmark = pytest.mark.crawl


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


def test_watch_and_status_read_a_running_crawl_on_sqlite(tmp_path: Path) -> None:
    _watch_a_running_crawl(tmp_path, {}, {"SCALE_STATE_DIR": str(tmp_path / "state")}, "watched")


def test_watch_and_status_read_a_running_crawl_on_redis(tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    _watch_a_running_crawl(tmp_path, {"SCALE_FRONTIER_URL": redis_url}, {"SCALE_FRONTIER_URL": redis_url}, redis_prefix)
