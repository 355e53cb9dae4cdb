"""`scrapy scale watch` and the numbers `scrapy scale status` adds: read from the backend
(the frontier's status and the snapshots the workers publish next to it) while a real
crawl runs, on SQLite and on Redis."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

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


def test_the_publisher_opens_redis_in_its_writer_thread_and_publishes_once_redis_is_up(redis_server: Any) -> None:
    """The worker's snapshot sink is opened by the first write, in the writer thread: a
    Redis that does not answer holds no reactor (before: ``spider_opened`` asked the node,
    waiting up to the 5 s socket timeout on the reactor thread), and a Redis down as the
    worker starts delays the snapshots to the first write after it is back (before: one
    warning, then no snapshot for the whole run)."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    class S(Spider):
        name = "watch-opens"

    silent = socket.socket()  # listens, never answers: a connection waits in its backlog
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    settings = {"SCALE_FRONTIER_URL": f"redis://127.0.0.1:{silent.getsockname()[1]}/0", "SCALE_JOB": "watch-opens"}
    crawler = get_crawler(S, settings)
    crawler._engine = crawler._create_engine()  # Scrapy's own, not started: what document() reads
    ext = worker_status.SnapshotPublisher.from_crawler(crawler)
    t0 = time.monotonic()
    ext.spider_opened(S())
    took = time.monotonic() - t0
    assert ext._loop is not None and ext._loop.running  # the snapshots are on
    ext._loop.stop()
    silent.settimeout(0.5)
    with pytest.raises(TimeoutError):
        silent.accept()  # nobody connected while the spider opened
    silent.close()
    assert took < 1, took
    assert ext.sink is None and ext.opened == 0

    url = f"redis://127.0.0.1:{redis_server.port}/0"
    ext.crawler.settings.frozen = False
    ext.crawler.settings.set("SCALE_FRONTIER_URL", url)
    doc = ext.document(time.monotonic())
    redis_server.kill()
    with pytest.raises(Exception, match="127.0.0.1"):
        ext.publish(doc)  # Redis down: this write fails (the tick's errback warns once)
    assert ext.sink is None
    redis_server.start()
    ext.publish(doc)  # the next write opens the sink and writes
    assert ext.opened == 1 and ext.sink is not None
    reader = worker_status.sink_for({"SCALE_FRONTIER_URL": url}, "watch-opens")
    assert [d["worker"] for d in reader.read()] == [doc["worker"]]
    reader.close()
    ext.sink.close()
