"""Helpers (no tests here) for the scrapyd tests: a real scrapyd on a free loopback port
in a temporary folder, the example project deployed with scrapyd-client, jobs scheduled
against a testbed through scrapyd's JSON API.

scrapyd runs with this interpreter; the crawls it starts find scrapy_scale through a
folder on PYTHONPATH that holds scrapy_scale alone (a link to the checkout's package),
so ``example_project`` can only come from the deployed egg, as on a real scrapyd host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from scrapy_scale.storage.backends import open_store as open_item_store
from tests.support.hang import hang_guard
from tests.support.services import LOOPBACK, Process, free_port

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "scrapy_scale_example"
SCRAPYD_DEPLOY = str(Path(sys.executable).with_name("scrapyd-deploy"))


class Scrapyd(Process):
    """scrapyd in ``workdir`` (eggs, logs, items, dbs and, if asked, jobs there)."""

    def __init__(self, workdir: Path, jobs_dir: bool = False):
        port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        lib = workdir / "lib"  # scrapy_scale alone, not the example project
        lib.mkdir(exist_ok=True)
        if not (lib / "scrapy_scale").exists():
            (lib / "scrapy_scale").symlink_to(ROOT / "scrapy_scale")
        conf = [
            "[scrapyd]",
            f"bind_address = {LOOPBACK}",
            f"http_port = {port}",
            f"eggs_dir = {workdir / 'eggs'}",
            f"logs_dir = {workdir / 'logs'}",
            f"items_dir = {workdir / 'items'}",
            f"dbs_dir = {workdir / 'dbs'}",
            "poll_interval = 0.2",
            "max_proc = 2",
        ]
        if jobs_dir:
            conf.append(f"jobs_dir = {workdir / 'jobs'}")
        (workdir / "scrapyd.conf").write_text("\n".join(conf) + "\n")
        self.url = f"http://{LOOPBACK}:{port}/"
        super().__init__("scrapyd", [sys.executable, "-m", "scrapyd"], port, workdir, self._ready)

    def start(self, timeout: float = 60) -> None:
        env_before = dict(os.environ)
        os.environ["PYTHONPATH"] = str(self.workdir / "lib")
        try:
            super().start(timeout)
        finally:
            os.environ.clear()
            os.environ.update(env_before)

    def _ready(self) -> bool:
        return self.get("daemonstatus.json")["status"] == "ok"

    def get(self, endpoint: str, **params: str) -> dict[str, Any]:
        url = self.url + endpoint + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
        """A POST, not retried (a second schedule.json would be a second job). Its bound is
        wide: schedule.json runs `scrapy list` from the egg (a Python start-up, importing
        Scrapy and scrapy_scale) the first time after a start, which took over 10 s once on
        the loaded test machine."""
        data = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(self.url + endpoint, data=data, timeout=180) as r:
            out = json.loads(r.read())
        assert out.get("status") == "ok", out
        return out  # type: ignore[no-any-return]

    def deploy(self) -> str:
        """``scrapyd-deploy`` from example_project/ (its own scrapy.cfg and setup.py); the
        output. The folder is left as it was (build/ and the egg-info are git-ignored)."""
        # a user-level scrapy.cfg (read before the project's) names this scrapyd as target "test"
        xdg = self.workdir / "xdg"
        xdg.mkdir(exist_ok=True)
        (xdg / "scrapy.cfg").write_text(f"[deploy:test]\nurl = {self.url}\n")
        env = dict(os.environ, PYTHONPATH=str(self.workdir / "lib"), XDG_CONFIG_HOME=str(xdg))
        res = subprocess.run(
            [SCRAPYD_DEPLOY, "test", "--project", PROJECT, "--version", "1"],
            cwd=ROOT / "example_project",
            env=env,
            capture_output=True,
            text=True,
            timeout=hang_guard(120),
        )
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout + res.stderr

    def schedule(self, settings: dict[str, Any], args: dict[str, str]) -> str:
        fields = [("project", PROJECT), ("spider", "catalog")]
        for k, v in settings.items():
            fields.append(("setting", f"{k}={json.dumps(v) if isinstance(v, dict | list) else v}"))
        fields += list(args.items())
        return str(self.post("schedule.json", fields)["jobid"])

    def job(self, jobid: str) -> tuple[str, dict[str, Any]] | None:
        """(state, entry) of a job in listjobs.json: pending, running or finished."""
        jobs = self.get("listjobs.json", project=PROJECT)
        for state in ("pending", "running", "finished"):
            for j in jobs.get(state, []):
                if j["id"] == jobid:
                    return state, j
        return None

    def wait_job(self, jobid: str, state: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + hang_guard(timeout)
        while time.monotonic() < deadline:
            got = self.job(jobid)
            if got and got[0] == state:
                return got[1]
            time.sleep(0.1)
        raise AssertionError(f"job {jobid} not {state} within {timeout}s; log tail:\n{self.job_log(jobid)[-3000:]}")

    def job_log(self, jobid: str) -> str:
        p = self.workdir / "logs" / PROJECT / "catalog" / f"{jobid}.log"
        return p.read_text(errors="replace") if p.exists() else "(no log)"

    def feed_items(self) -> list[dict[str, Any]]:
        """Every item of every feed file scrapyd's items_dir holds (all jobs)."""
        out = []
        for f in sorted((self.workdir / "items" / PROJECT / "catalog").glob("*.jl")):
            out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        return out


def stored_count(store_url: str) -> int:
    """Rows in the item store, 0 while the crawl has not created it yet."""
    s = open_item_store(store_url, "items")
    try:
        s.open()
        return s.count()
    except Exception:  # noqa: BLE001 - the crawl may still be creating the file
        return 0
    finally:
        s.close()


def pid_alive(pid: int) -> bool:
    """The process runs (a zombie, killed and not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
