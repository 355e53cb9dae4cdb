"""scrapyd, for real: the example project deployed with scrapyd-client to a real scrapyd
on loopback, a job killed together with scrapyd (SIGKILL to both) mid-crawl, scrapyd
restarted and the spider scheduled again: every page crawled, each item stored once,
and scrapyd's items files (one per scrapyd job) hold every item between them. The same
with scrapyd's ``jobs_dir`` (a JOBDIR per scrapyd job id), and a clean stop through
``cancel.json``. Moments are chosen from progress (items stored), never the clock."""

from __future__ import annotations

import os
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crash_support import (
    HOLD,
    all_paths,
    check_items_exact,
    expected_requests,
    frontier_counts,
    served_ok_paths,
    stored_items,
)
from tests.support.hang import hang_guard
from tests.support.scrapyd_support import PROJECT, ROOT, SCRAPYD_DEPLOY, Scrapyd, pid_alive, stored_count
from tests.support.services import wait_until

# not serial: the kills come at moments read from the store (progress), scrapyd has its own
# port and folder, and its API calls have wide bounds (schedule.json runs `scrapy list`)
pytestmark = pytest.mark.crawl

SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 16,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
    "DOWNLOAD_DELAY": 0,
    "LOG_LEVEL": "INFO",
    "SCALE_FRONTIER_LEASE": 10.0,
}


def _schedule(sd: Scrapyd, tb: Testbed, **settings: Any) -> str:
    return sd.schedule({**SETTINGS, **tb.scrapy_settings(), **settings}, {"start_urls": ",".join(tb.start_urls)})


def _wait_stored(sd: Scrapyd, jobid: str, store_url: str, n: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + hang_guard(timeout)
    while time.monotonic() < deadline:
        got = stored_count(store_url)
        if got >= n:
            return got
        state = sd.job(jobid)
        assert state is None or state[0] != "finished", f"job ended before {n} items:\n{sd.job_log(jobid)[-3000:]}"
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} items stored within {timeout}s:\n{sd.job_log(jobid)[-3000:]}")


def _kill_resume_check(tmp_path: Path, *, jobs_dir: bool, seed: int) -> tuple[Scrapyd, list[str]]:
    sd = Scrapyd(tmp_path / "scrapyd", jobs_dir=jobs_dir)
    # where scrapy-scale keeps the job's state under this scrapyd: its working folder's
    # .scale by default; with jobs_dir, the spider's folder there (not the per-job JOBDIR)
    state = sd.workdir / ("jobs/" + PROJECT + "/catalog" if jobs_dir else ".scale")
    store_url = f"sqlite:///{state}/items.sqlite"
    with Testbed(hosts=3, pages=60, seed=seed) as tb:
        total = expected_requests(tb)
        sd.start()
        try:
            out = sd.deploy()
            assert "scrapy_scale_example" in out
            tb.set_faults(HOLD)  # the first job cannot drain (and end) before its kill
            first = _schedule(sd, tb)
            running = sd.wait_job(first, "running", 60)
            _wait_stored(sd, first, store_url, len(tb.detail_urls()) // 3)
            sd.kill()  # SIGKILL to scrapyd's process group: scrapyd and the crawl it runs
            wait_until(lambda: not pid_alive(running["pid"]), 10, "the crawl to die with scrapyd")
            counts = frontier_counts(f"sqlite:///{state}/frontier.db", "catalog")
            assert counts["done"] < total, counts
            tb.set_faults([])
            sd.start()
            second = _schedule(sd, tb)
            sd.wait_job(second, "finished", 150)
            log = sd.job_log(second)
            assert "run finished" in log or "drained" in log, log[-3000:]
            assert "resum" in log or "took back" in log, log[-3000:]
            # the killed job's journal was found (in the same state folder) and its items re-sent
            assert "feeds: re-sent" in log, log[-3000:]
            counts = frontier_counts(f"sqlite:///{state}/frontier.db", "catalog")
            assert counts == {"pending": 0, "delayed": 0, "leased": 0, "done": total, "failed": 0}, counts
            missing = all_paths(tb) - served_ok_paths(tb)
            assert not missing, f"{len(missing)} pages never crawled"
            check_items_exact(tb, stored_items(store_url))
            feeds = sd.feed_items()
            assert {i["url"] for i in feeds} == tb.detail_urls(), "scrapyd's items files miss items"
            if jobs_dir:  # scrapyd gave each job its own JOBDIR; the state did not follow it
                jobdirs = sorted(p.name for p in (sd.workdir / "jobs" / PROJECT / "catalog").iterdir() if p.is_dir())
                assert first in jobdirs and second in jobdirs, jobdirs
                assert not list((sd.workdir / "jobs" / PROJECT / "catalog" / second).glob("*.db"))
        finally:
            sd.stop()
    return sd, [first, second]


@pytest.mark.timeout(420)
def test_scrapyd_job_and_scrapyd_killed_then_a_new_job_resumes(tmp_path: Path) -> None:
    sd, _ = _kill_resume_check(tmp_path, jobs_dir=False, seed=31)
    assert (sd.workdir / ".scale" / "frontier.db").exists()


@pytest.mark.timeout(420)
def test_scrapyd_with_jobs_dir_a_new_job_id_resumes_the_same_frontier(tmp_path: Path) -> None:
    sd, _ = _kill_resume_check(tmp_path, jobs_dir=True, seed=32)
    assert not (sd.workdir / ".scale").exists()


@pytest.mark.timeout(300)
def test_cancel_json_stops_the_job_cleanly_and_the_next_job_resumes(tmp_path: Path) -> None:
    sd = Scrapyd(tmp_path / "scrapyd")
    state = sd.workdir / ".scale"
    store_url = f"sqlite:///{state}/items.sqlite"
    with Testbed(hosts=2, pages=60, seed=33) as tb:
        total = expected_requests(tb)
        sd.start()
        try:
            sd.deploy()
            tb.set_faults(HOLD)
            # a clean stop waits for the requests in flight: the held page's times out soon
            first = _schedule(sd, tb, DOWNLOAD_TIMEOUT=3)
            sd.wait_job(first, "running", 60)
            _wait_stored(sd, first, store_url, len(tb.detail_urls()) // 3)
            assert sd.post("cancel.json", [("project", PROJECT), ("job", first)])["prevstate"] == "running"
            sd.wait_job(first, "finished", 120)  # one SIGINT: Scrapy's clean shutdown
            log = sd.job_log(first)
            assert "'finish_reason': 'shutdown'" in log and "Traceback" not in log, log[-3000:]
            # issue 31: the summary said `the same scrapy crawl again resumes`, and its command
            # had no folder (scrapyd's working folder is not where the user runs it)
            assert (
                f"a new scrapyd job of spider catalog (schedule.json -d project={PROJECT} -d spider=catalog) "
                "resumes the unfinished requests" in log
            ), log[-3000:]
            assert f"look further  scrapy scale status catalog -s SCALE_STATE_DIR={state}\n" in log, log[-3000:]
            tb.set_faults([])
            second = _schedule(sd, tb)
            sd.wait_job(second, "finished", 150)
            counts = frontier_counts(f"sqlite:///{state}/frontier.db", "catalog")
            assert counts["done"] == total, counts
            check_items_exact(tb, stored_items(store_url))
            assert {i["url"] for i in sd.feed_items()} == tb.detail_urls()
        finally:
            sd.stop()


@pytest.mark.timeout(180)
def test_the_egg_holds_the_project_only_and_the_root_deploys_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path))  # no user-level deploy target
    egg = tmp_path / "project.egg"
    res = subprocess.run(
        [SCRAPYD_DEPLOY, "--build-egg", str(egg)], cwd=ROOT / "example_project", env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    names = zipfile.ZipFile(egg).namelist()
    modules = sorted(n for n in names if not n.startswith("EGG-INFO/"))
    assert modules == [
        "example_project/__init__.py",
        "example_project/settings.py",
        "example_project/spiders/__init__.py",
        "example_project/spiders/catalog.py",
    ], modules
    assert "settings = example_project.settings" in zipfile.ZipFile(egg).read("EGG-INFO/entry_points.txt").decode()
    # from the repository root there is no deploy target: scrapyd-deploy stops before it
    # would write a setup.py of its own and pack the whole repository
    res = subprocess.run([SCRAPYD_DEPLOY], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 1 and "Unknown target: default" in res.stderr, res.stderr
    assert not (ROOT / "setup.py").exists()
