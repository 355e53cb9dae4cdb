"""`scrapy scale status` tells a running job from an interrupted one (both backends):
workers keep a heartbeat; after Ctrl-C, kill -9 or a startup that recorded a run and
died, status says `interrupted (no live worker since T)` instead of `running`. Real
`scrapy crawl` processes, real signals; moments chosen from progress."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.frontier import open_store
from scrapy_scale.testbed import Testbed
from tests.crawl.test_commands import scale, status_json
from tests.support.crawling import CrawlProcess, start_crawl
from tests.support.hang import hang_guard

pytestmark = [pytest.mark.crawl, pytest.mark.paced]


def _poll(pred: Callable[[], Any], timeout: float, what: str, proc: CrawlProcess | None = None) -> Any:
    deadline = time.monotonic() + hang_guard(timeout)
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"the crawl exited (rc={proc.returncode}) while waiting for {what}:\n{proc.result().tail()}"
            )
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_status_says_interrupted_when_no_worker_is_alive(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "redis":
        job, url = request.getfixturevalue("redis_prefix"), request.getfixturevalue("redis_url")
    else:
        job, url = "alive", f"sqlite:///{tmp_path}/state/frontier.db"
    s = {"SCALE_FRONTIER_URL": url}
    crawl = {
        "SCALE_JOB": job,
        "SCALE_FRONTIER_URL": url,
        "SCALE_FRONTIER_WORKER": "w0",
        "SCALE_FRONTIER_LEASE": 4.0,
        "CONCURRENT_REQUESTS": 4,
    }

    def status() -> dict[str, Any]:
        return status_json(job, s)

    def running_with(done: int) -> Callable[[], Any]:
        def pred() -> Any:
            try:
                st = status()
            except AssertionError:  # the job is not created yet
                return None
            return st if st["counts"]["done"] >= done and st["run"]["state"] == "running" else None

        return pred

    with Testbed(hosts=2, pages=120, seed=9, faults="slow:/item/*,delay=0.2") as tb:
        # a worker at work: running, and it is listed
        proc = start_crawl(tb, crawl, tmp_path)
        try:
            st = _poll(running_with(3), 90, "status to show the crawl running", proc)
            assert st["live_workers"] == ["w0"] and st["workers"]["w0"]["live"] is True
            assert st["run"]["no_live_worker_since"] is None
            text = scale("status", job, settings=s).stdout
            assert "run 1: running" in text and "live workers: w0" in text, text
            # kill -9: status says running until the heartbeat runs out, then interrupted
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(hang_guard(30))
        finally:
            if proc.poll() is None:
                proc.kill()
        killed_at = time.time()
        st = _poll(
            lambda: (lambda x: x if x["run"]["state"] == "interrupted" else None)(status()),
            60,
            "status to say interrupted after kill -9",
        )
        assert st["live_workers"] == [] and st["run"]["ended_at"] is None
        assert st["run"]["no_live_worker_since"] <= killed_at
        text = scale("status", job, settings=s).stdout
        assert "run 1: interrupted (no live worker since " in text and "live workers: none" in text, text

        # Ctrl-C: a clean shutdown stops the heartbeat at once (the run stays unfinished)
        proc = start_crawl(tb, crawl, tmp_path)
        try:
            done = st["counts"]["done"]
            _poll(running_with(done + 3), 90, "the resumed crawl to make progress", proc)
            proc.send_signal(signal.SIGINT)
            res = proc.finish(90)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert res.returncode is not None and "shutdown" in res.log, res.tail()
        st = status()
        assert st["run"]["state"] == "interrupted", st  # no waiting for a heartbeat to run out
        assert st["workers"]["w0"]["live"] is False

    # a startup that recorded a run (resumed) and died before its first heartbeat:
    store = open_store(url, job)
    try:
        store.reset()
        run = store.begin_run()
    finally:
        store.close()
    st = status()
    assert st["run"]["state"] == "interrupted" and st["run"]["no_live_worker_since"] == run.started_at
