"""`scrapy scale status|seed|reset|requeue`, run through Scrapy's command line (in this
process, cwd = the repository, example_project settings; the entry point and a closed
pipe as real subprocesses) against frontiers that real `scrapy crawl` runs of the
catalog spider wrote."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import scrapy.cmdline

from scrapy_scale.frontier import open_store
from scrapy_scale.testbed import Testbed
from tests.support.crash_support import (
    HOLD,
    check_items_exact,
    expected_requests,
    stored_items,
)
from tests.support.crawling import ROOT, run_crawl, start_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl


def scale(
    *args: str, cwd: Path = ROOT, settings: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``scrapy scale ARGS -s K=V...`` run in this process, through Scrapy's own command
    line (``scrapy.cmdline.execute``: the project's settings as found from ``cwd``, the
    command from the installed entry point, argument errors, exit status); stdout, stderr
    (with the warnings a process without logging set up prints) and the exit status come
    back as from a subprocess. ``timeout`` is kept for the callers; it is not enforced."""
    argv = ["scrapy", "scale", *args]
    for k, v in (settings or {}).items():
        argv += ["-s", f"{k}={v}"]
    out, err = io.StringIO(), io.StringIO()
    # as a fresh process would have them: no settings module from the environment; what
    # Scrapy's project lookup sets (environment, sys.path, cwd) is put back afterwards
    saved_env, saved_path, saved_cwd = dict(os.environ), list(sys.path), os.getcwd()
    os.environ.pop("SCRAPY_SETTINGS_MODULE", None)
    warnings = logging.StreamHandler(err)
    warnings.setLevel(logging.WARNING)
    logging.getLogger().addHandler(warnings)
    code: int | str | None = 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                scrapy.cmdline.execute(argv)
            except SystemExit as e:
                code = e.code
    finally:
        logging.getLogger().removeHandler(warnings)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(argv, returncode, out.getvalue(), err.getvalue())


def scale_process(
    *args: str, cwd: Path = ROOT, settings: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m scrapy scale ARGS`` as a real subprocess (the entry point, exit at the OS level)."""
    argv = [sys.executable, "-m", "scrapy", "scale", *args]
    for k, v in (settings or {}).items():
        argv += ["-s", f"{k}={v}"]
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=hang_guard(timeout))


def status_json(job: str, settings: dict[str, str], cwd: Path = ROOT) -> dict[str, Any]:
    p = scale("status", job, "--json", cwd=cwd, settings=settings)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_scale_is_a_scrapy_command_from_the_installed_entry_point() -> None:
    # no COMMANDS_MODULE in example_project: the command comes from the scrapy.commands entry point
    p = subprocess.run(
        [sys.executable, "-m", "scrapy"], cwd=ROOT, capture_output=True, text=True, timeout=hang_guard(60)
    )
    assert p.returncode == 0
    assert any(line.split()[:1] == ["scale"] for line in p.stdout.splitlines()), p.stdout
    h = scale_process("-h")
    assert h.returncode == 0 and "requeue" in h.stdout
    p = scale_process("status", "nosuchjob", settings={"SCALE_STATE_DIR": "/nonexistent/state"})
    assert p.returncode == 1 and "scrapy scale status: error: no frontier at" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_bad_input_gives_clear_errors(tmp_path: Path) -> None:
    s = {"SCALE_STATE_DIR": str(tmp_path / "state")}
    p = scale("seed", "known", "http://shop.example.test/", settings=s)
    assert p.returncode == 0, p.stderr

    p = scale("status", "nosuchjob", settings=s)
    assert p.returncode == 1
    assert "unknown job 'nosuchjob'" in p.stderr and "known jobs: known" in p.stderr, p.stderr

    p = scale("requeue", "known", "--class", "blockd", settings=s)
    assert p.returncode == 1
    assert "unknown failure class 'blockd'" in p.stderr and "blocked" in p.stderr, p.stderr

    p = scale("requeue", "known", settings=s)
    assert p.returncode == 2 and "--class CLASS is required" in p.stderr, p.stderr

    p = scale("status", settings=s)
    assert p.returncode == 2 and "missing JOB" in p.stderr, p.stderr

    p = scale("frobnicate", "known", settings=s)
    assert p.returncode == 2 and "status, seed, reset, requeue" in p.stderr, p.stderr

    p = scale("seed", "known", "not-a-url", settings=s)
    assert p.returncode == 1 and "not an absolute http(s) URL: not-a-url" in p.stderr, p.stderr

    p = scale("status", "known", settings={"SCALE_STATE_DIR": str(tmp_path / "elsewhere")})
    assert p.returncode == 1 and "no frontier at" in p.stderr, p.stderr

    p = scale("status", "known", settings={**s, "SCALE_FRONTIER_URL": "ftp://x/y"})
    assert p.returncode == 1 and "SCALE_FRONTIER_URL: unknown URL scheme 'ftp'" in p.stderr, p.stderr

    p = scale("status", "known", settings={"SCALE_FRONTIER_URL": "redis://127.0.0.1:1/0"})
    assert p.returncode == 1 and "cannot reach Redis" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_status_requeue_blocked_then_resume_gets_every_item(tmp_path: Path) -> None:
    """A crawl ends with 10 pages failed as blocked (403); status shows them by class;
    requeue --class blocked puts them back; the next crawl (the site no longer blocks)
    fetches just those, and the job ends complete."""
    job = "shop"
    s = {"SCALE_STATE_DIR": str(tmp_path / "state")}
    with Testbed(hosts=2, pages=40, seed=6, faults="403@1:/item/1?") as tb:
        total = expected_requests(tb)
        res = run_crawl(tb, {"SCALE_JOB": job}, tmp_path, timeout=120)
        assert res.returncode == 0, res.tail()

        st = status_json(job, s)
        assert st["counts"] == {"pending": 0, "delayed": 0, "leased": 0, "done": total - 10, "failed": 10}
        assert st["failed_by_class"] == {"blocked": 10}
        assert st["run"]["state"] == "finished" and st["drained"] is True
        assert st["leases_by_worker"] == {}
        text = scale("status", job, settings=s)
        assert text.returncode == 0
        assert "failed by class: blocked 10" in text.stdout and f"done      {total - 10:>7}" in text.stdout

        assert scale("requeue", job, "--class", "rate_limited", settings=s).stdout.startswith(
            f"{job}: 0 request(s) of class rate_limited"
        )
        p = scale("requeue", job, "--class", "blocked", settings=s)
        assert p.returncode == 0 and f"{job}: 10 request(s) of class blocked put back to pending" in p.stdout
        st = status_json(job, s)
        assert st["counts"]["pending"] == 10 and st["counts"]["failed"] == 0
        # reopened, but no worker is on it until the next crawl
        assert st["run"]["state"] == "interrupted" and st["oldest_pending_age"] is not None

        tb.set_faults("")
        tb.clear_log()
        res2 = run_crawl(tb, {"SCALE_JOB": job}, tmp_path, timeout=120)
        assert res2.returncode == 0, res2.tail()
        fetched = {r.path for r in tb.log if r.path.startswith("/item/")}
        assert fetched == {f"/item/{n}" for n in range(10, 20)}, "only the requeued pages are fetched again"
        st = status_json(job, s)
        assert st["counts"] == {"pending": 0, "delayed": 0, "leased": 0, "done": total, "failed": 0}
        assert st["run"]["id"] == 1, "requeue continued the run instead of starting over"
        check_items_exact(tb, stored_items(f"sqlite:///{tmp_path}/state/items.sqlite"))


def test_seed_then_crawl_takes_the_seeds_and_reset_starts_over(tmp_path: Path) -> None:
    job = "seeded"
    s = {"SCALE_STATE_DIR": str(tmp_path / "state")}
    with Testbed(hosts=2, pages=20, seed=7) as tb:
        host1, host2 = tb.start_urls
        p = scale("seed", job, host2, host2, settings=s)  # the second is a duplicate
        assert p.returncode == 0 and f"{job}: 1 of 2 URL(s) enqueued (1 already known)" in p.stdout, p.stdout
        st = status_json(job, s)
        assert st["counts"]["pending"] == 1 and st["run"]["state"] == "interrupted"  # no worker yet
        assert st["live_workers"] == [] and st["run"]["no_live_worker_since"] == st["run"]["started_at"]

        # the spider starts from host 1 only; the seed brings host 2
        res = run_crawl(tb, {"SCALE_JOB": job}, tmp_path, timeout=120, start_urls=[host1])
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()
        assert "run 1 (resumed)" in res.log

        # reset a job killed half-way: the next crawl starts a new run and fetches everything.
        # One page hangs meanwhile, so the crawl cannot end by itself before the kill
        # (waiting for done >= 10 alone raced the crawl's end on a fast machine)
        tb.set_faults(HOLD)
        proc = start_crawl(tb, {"SCALE_JOB": "half"}, tmp_path)
        store = open_store(f"sqlite:///{tmp_path}/state/frontier.db", "half")
        try:
            deadline = time.monotonic() + hang_guard(60)
            while store.counts()["done"] < 10 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
        finally:
            store.close()
        assert proc.poll() is None, "the crawl ended before it could be killed half-way"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(hang_guard(30))
        tb.set_faults("")
        p = scale("reset", "half", settings=s)
        assert p.returncode == 0 and "the next `scrapy crawl` starts the job over" in p.stdout, p.stdout
        st = status_json("half", s)
        assert st["total"] == 0 and st["run"]["state"] == "finished"
        tb.clear_log()
        res = run_crawl(tb, {"SCALE_JOB": "half"}, tmp_path, timeout=120)
        assert res.returncode == 0, res.tail()
        assert "run 2 (new)" in res.log, res.tail()
        assert {r.path for r in tb.log if r.path.startswith("/item/")} == {f"/item/{n}" for n in range(1, 21)}


def test_status_of_a_running_redis_job_from_outside_the_project(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """While a worker crawls, `scrapy scale status` run from another folder (no Scrapy
    project there, as on another machine) sees the run, its leases and progress."""
    job = redis_prefix
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    s = {"SCALE_FRONTIER_URL": redis_url}
    # one page hangs while the test looks, so the crawl cannot finish between two status calls
    # (it did once on a loaded machine); released once seen: its timed-out attempt is retried.
    # The hang keeps the crawl running, not its length (paced, 150 pages took a minute)
    with Testbed(hosts=2, pages=10, seed=8, faults="hang@1:/item/1;slow:/item/*,delay=0.05") as tb:
        proc = start_crawl(
            tb,
            {
                "SCALE_JOB": job,
                "SCALE_FRONTIER_URL": redis_url,
                "SCALE_FRONTIER_WORKER": "crawler-a",
                "CONCURRENT_REQUESTS": 4,
                "DOWNLOAD_TIMEOUT": 3,
                "SCALE_RETRY_POLICY": {"transient": {"retries": 50, "base": 0.1, "cap": 0.5}},
            },
            tmp_path,
        )
        try:
            seen: dict[str, Any] | None = None
            deadline = time.monotonic() + hang_guard(60)
            while time.monotonic() < deadline and proc.poll() is None:
                p = scale("status", job, "--json", cwd=elsewhere, settings=s)
                if p.returncode == 0:
                    st = json.loads(p.stdout)
                    if st["counts"]["done"] > 0 and st["leases_by_worker"]:
                        seen = st
                        break
                time.sleep(0.2)
            assert seen is not None, "status never showed the running job"
            assert seen["run"]["state"] == "running" and seen["drained"] is False
            assert set(seen["leases_by_worker"]) == {"crawler-a"}
            assert seen["average_wait"] is not None
            text = scale("status", job, cwd=elsewhere, settings=s)
            assert "leases by worker: crawler-a" in text.stdout and "run 1: running" in text.stdout
            tb.set_faults("slow:/item/*,delay=0.05")
            res = proc.finish(120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert res.returncode == 0, res.tail()
        st = status_json(job, s, cwd=elsewhere)
        assert st["counts"]["done"] == expected_requests(tb) and st["run"]["state"] == "finished"


def test_status_into_a_reader_that_closed_its_end_exits_quietly(tmp_path: Path) -> None:
    """`scrapy scale status JOB | head`: no BrokenPipeError traceback, as other CLI tools.
    The pipe's read end is closed before the command starts, so its first write fails."""
    where = {"SCALE_STATE_DIR": str(tmp_path / "state")}
    urls = [f"http://shop{i}.example.test/item/{n}" for i in range(3) for n in range(50)]
    assert scale("seed", "piped", *urls, settings=where).returncode == 0
    for args in (["status", "piped"], ["status", "piped", "--json"]):
        r, w = os.pipe()
        os.close(r)
        argv = [sys.executable, "-m", "scrapy", "scale", *args, "-s", f"SCALE_STATE_DIR={where['SCALE_STATE_DIR']}"]
        env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
        try:
            p = subprocess.run(
                argv, cwd=ROOT, env=env, stdout=w, stderr=subprocess.PIPE, text=True, timeout=hang_guard(60)
            )
        finally:
            os.close(w)
        assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
        assert p.returncode == 1, (p.returncode, p.stderr)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_reset_forgets_the_learned_pacing_and_egress_state_unless_kept(
    tmp_path: Path, backend: str, redis_url: str, redis_prefix: str
) -> None:
    """Issue 19 item 17: `reset` left throttle.db alone, so a reset job started at the delay
    the last run learned (the demo got slower run after run, reset or not)."""
    from scrapy.settings import Settings

    from scrapy_scale.egress.shared import open_state
    from scrapy_scale.throttle import status as pacing_status
    from scrapy_scale.throttle.settings import throttle_url
    from scrapy_scale.throttle.shared import open_shared

    job, other = f"{redis_prefix}-a", f"{redis_prefix}-b"
    s = {"SCALE_STATE_DIR": str(tmp_path / "state")}
    if backend == "redis":
        s["SCALE_FRONTIER_URL"] = redis_url
    settings = Settings(s)
    for j in (job, other):
        assert scale("seed", j, "http://a.example.test/", settings=s).returncode == 0
        shared = open_shared(throttle_url(settings), j)
        shared.save({"a.example.test": {"delay": 4.3, "too_fast": 3.9, "too_fast_at": time.time(), "at": time.time()}})
        shared.close()
        egress = open_state(settings, j)
        egress.sync("w1", {"proxy:1": {"state": "quarantined", "at": time.time()}}, {"requests": 3}, time.time())
        egress.close()

    def left(j: str) -> tuple[list[str], bool]:
        egress = open_state(settings, j)
        try:
            return [r["site"] for r in pacing_status.read(settings, j)], any(egress.read_all().values())
        finally:
            egress.close()

    p = scale("reset", job, "--keep-learned", settings=s)
    assert p.returncode == 0 and "learned pacing and egress state kept" in p.stdout, p.stdout
    assert left(job) == (["a.example.test"], True)
    p = scale("reset", job, settings=s)
    assert p.returncode == 0 and "learned pacing and egress state cleared" in p.stdout, p.stdout
    assert left(job) == ([], False)
    assert left(other) == (["a.example.test"], True)  # another job's are its own


def test_reset_with_an_unreachable_learned_state_says_so_without_a_traceback(tmp_path: Path) -> None:
    """Review of issue 19: with the throttle's Redis unreachable, `reset` reset the frontier and
    then printed a traceback. It says the learned state was not cleared, and exits 1."""
    s = {"SCALE_STATE_DIR": str(tmp_path / "state"), "SCALE_THROTTLE_URL": "redis://127.0.0.1:1/0"}
    assert scale("seed", "job", "http://a.example.test/", settings=s).returncode == 0
    p = scale("reset", "job", settings=s)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert "job: reset (1 request record(s) removed; learned pacing and egress state NOT cleared)" in p.stdout
    assert "scrapy scale reset: error: learned pacing not cleared (" in p.stderr, p.stderr


def test_status_from_the_folder_scrapyd_deploy_runs_in(tmp_path: Path) -> None:
    """Issue 31: `scrapy scale status catalog` from example_project/ (where the docs run
    scrapyd-deploy) failed with `No module named 'example_project'`; with the default
    relative state folder it must say where it looked and where a scrapyd job's state is."""
    deploy = ROOT / "example_project"
    p = scale_process(
        "seed", "catalog", "http://127.0.0.1:9/a", cwd=deploy, settings={"SCALE_STATE_DIR": str(tmp_path)}
    )
    assert p.returncode == 0 and "1 of 1 URL(s) enqueued" in p.stdout, p.stderr
    p = scale_process("status", "catalog", cwd=deploy, settings={"SCALE_STATE_DIR": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    assert f"job catalog  (frontier sqlite:///{tmp_path}/frontier.db)" in p.stdout and "note:" not in p.stdout
    # the default .scale, relative: the folder it looked in and the scrapyd hint, no traceback
    p = scale_process("status", "catalog", cwd=deploy, settings={"SCALE_STATE_DIR": ".scale-nothing-here"})
    assert p.returncode == 1 and "Traceback" not in p.stderr and "ModuleNotFoundError" not in p.stderr
    assert f"note: looked in {deploy / '.scale-nothing-here'}" in p.stderr, p.stderr
    assert "scrapyd jobs keep their state in scrapyd's working folder" in p.stderr
    assert not (deploy / ".scale-nothing-here").exists()


def test_egress_without_a_pool_says_which_setting_is_missing(tmp_path: Path) -> None:
    """Issue 31: with no pool yet, `scrapy scale egress` told the user to give
    SCALE_FRONTIER_URL / SCALE_STATE_DIR even where the state was found: the job simply ran
    without SCALE_EGRESSES."""
    from scrapy.settings import Settings

    from scrapy_scale.egress.shared import open_state

    p = scale("egress", "catalog", settings={"SCALE_STATE_DIR": str(tmp_path / "nothing")})
    assert p.returncode == 1 and f"no egress state at {tmp_path / 'nothing' / 'egress.db'}" in p.stderr, p.stderr
    assert "SCALE_STATE_DIR" in p.stderr and "SCALE_EGRESSES" not in p.stderr
    store = open_state(Settings({"SCALE_STATE_DIR": str(tmp_path)}), "other")  # the state file, no pool of catalog
    store.close()
    p = scale("egress", "catalog", settings={"SCALE_STATE_DIR": str(tmp_path)})
    assert p.returncode == 1 and "job 'catalog' has no egress pool in" in p.stderr, p.stderr
    assert "no crawl of it ran with SCALE_EGRESSES" in p.stderr and "SCALE_FRONTIER_URL" not in p.stderr


def test_report_with_an_unreachable_mongodb_says_so_in_one_line(tmp_path: Path) -> None:
    """Issue 31: an unreachable MongoDB gave the quality report a 20-line traceback."""
    url = "mongodb://reader:s3cret@127.0.0.1:1/shop?serverSelectionTimeoutMS=300"
    p = scale("report", "catalog", cwd=tmp_path, settings={"SCALE_STATE_DIR": str(tmp_path), "SCALE_STORE_URL": url})
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert (
        lines[0].startswith("scrapy scale report: error: cannot read the item store mongodb://***@127.0.0.1:1/shop")
        and "Connection refused" in lines[0]
    ), lines
    assert "s3cret" not in p.stderr
