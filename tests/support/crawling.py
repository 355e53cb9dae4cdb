"""Run real `scrapy crawl` subprocesses against a testbed, for tests.

    from tests.support.crawling import run_crawl, start_crawl

    with Testbed(hosts=2, pages=40) as tb:
        res = run_crawl(tb, {"SCALE_X": 1}, tmp_path)
        assert res.returncode == 0
        assert {i["url"] for i in res.items} == tb.detail_urls()
        res.stats["item_scraped_count"]

Each run gets its own folder ``tmp_path/crawlN`` (items.jsonl, stats.json, crawl.log,
the generated settings module). The Scrapy settings are, from weakest to strongest:
example_project/settings.py, then these defaults -- the testbed's resolver settings,
``SCALE_STATE_DIR = tmp_path/"state"`` (shared by every run in the same tmp_path, so a
second run resumes the first), ``TELNETCONSOLE_ENABLED = False``, ``DOWNLOAD_DELAY = 0`` -- then the items feed
and the stats dump, then ``settings``. They are written as a settings module (project
priority, above the add-on's defaults), so values keep their Python types: use literals
(dicts, lists, numbers, strings; a class as its dotted path). A key in ``settings`` whose
value is None is removed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapy import signals

from tests.support.hang import hang_guard

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
STATS_SETTING = "TEST_STATS_FILE"
#: for crawls whose test is not about pacing: no start delay per site (the add-on's polite
#: 0.25 s made a one-host crawl of 40 pages take ~15 s); the delay still adapts as usual
UNPACED: dict[str, Any] = {"SCALE_DOMAIN_PROFILES": {"default": {"start_delay": 0.0}}}


class StatsDump:
    """Extension: writes the crawl's stats as JSON to ``TEST_STATS_FILE`` when it ends."""

    def __init__(self, crawler: Any, path: str):
        self.crawler = crawler
        self.path = path

    @classmethod
    def from_crawler(cls, crawler: Any) -> StatsDump:
        ext = cls(crawler, crawler.settings.get(STATS_SETTING))
        crawler.signals.connect(ext.write, signal=signals.spider_closed)
        crawler.signals.connect(ext.write, signal=signals.engine_stopped)
        return ext

    def write(self, *args: Any, **kwargs: Any) -> None:
        if not self.path:
            return
        stats = self.crawler.stats.get_stats()
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(stats, f, default=str, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


@dataclass
class CrawlResult:
    returncode: int | None
    items: list[dict[str, Any]]
    stats: dict[str, Any]
    log: str
    run_dir: Path
    duration: float = 0.0
    argv: list[str] = field(default_factory=list)

    @property
    def item_urls(self) -> set[str]:
        return {i["url"] for i in self.items}

    def tail(self, n: int = 3000) -> str:
        return self.log[-n:]


class CrawlProcess(subprocess.Popen):  # type: ignore[type-arg]
    """A running crawl: a Popen (kill(), send_signal(), wait(), pid) plus its outputs."""

    run_dir: Path
    started: float
    crawl_argv: list[str]

    def finish(self, timeout: float = 120) -> CrawlResult:
        """Wait for the crawl to end (killing it after ``timeout`` s) and read its outputs."""
        try:
            self.wait(hang_guard(timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise AssertionError(
                f"crawl did not finish within {hang_guard(timeout):.0f}s; log tail:\n{read_outputs(self.run_dir)[2][-3000:]}"
            ) from None
        return self.result()

    def result(self) -> CrawlResult:
        """The outputs as they are now (after finish(), or after the test killed the crawl)."""
        items, stats, log = read_outputs(self.run_dir)
        return CrawlResult(
            self.returncode, items, stats, log, self.run_dir, time.monotonic() - self.started, self.crawl_argv
        )


def read_outputs(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    items_file, stats_file, log_file = run_dir / "items.jsonl", run_dir / "stats.json", run_dir / "crawl.log"
    items = []
    if items_file.exists():
        for line in items_file.read_text().splitlines():
            if line.strip():
                items.append(json.loads(line))
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    log = log_file.read_text(errors="replace") if log_file.exists() else ""
    return items, stats, log


def _literal(name: str, value: Any) -> str:
    text = repr(value)
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise TypeError(f"setting {name}: {value!r} is not a Python literal; pass a dotted path") from None
    return text


def start_crawl(
    testbed: Any,
    settings: dict[str, Any] | None,
    tmp_path: Path,
    spider: str = "catalog",
    extra_args: list[str] | tuple[str, ...] = (),
    start_urls: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> CrawlProcess:
    """Start ``python -m scrapy crawl SPIDER`` (cwd = repo root) and return it running.

    ``testbed``: a started Testbed (its resolver settings and start URLs are passed), or
    None (the spider then uses its own targets). ``start_urls`` overrides the testbed's.
    """
    tmp_path = Path(tmp_path)
    n = 1
    while (tmp_path / f"crawl{n}").exists():
        n += 1
    run_dir = tmp_path / f"crawl{n}"
    run_dir.mkdir(parents=True)
    merged: dict[str, Any] = {}
    if testbed is not None:
        merged.update(testbed.scrapy_settings())
    merged["SCALE_STATE_DIR"] = str(tmp_path / "state")
    merged["TELNETCONSOLE_ENABLED"] = False
    # the example project is polite (DOWNLOAD_DELAY) for the demo; tests run at full speed unless they set it
    merged["DOWNLOAD_DELAY"] = 0
    # late retries come back minutes later: tests of give-ups run without them unless they set them
    merged["SCALE_RETRY_LATE"] = 0
    merged["FEEDS"] = {str(run_dir / "items.jsonl"): {"format": "jsonlines"}}
    merged[STATS_SETTING] = str(run_dir / "stats.json")
    user = dict(settings or {})
    ext = dict(user.pop("EXTENSIONS", None) or {})
    ext.setdefault("tests.support.crawling.StatsDump", 0)
    merged["EXTENSIONS"] = ext
    merged.update(user)
    module = f"crawl_settings_{n}"
    lines = ["from example_project.settings import *  # noqa: F401,F403", ""]
    lines += [f"{k} = {_literal(k, v)}" for k, v in merged.items() if v is not None]
    lines += [f"globals().pop({k!r}, None)" for k, v in merged.items() if v is None]
    (run_dir / f"{module}.py").write_text("\n".join(lines) + "\n")
    urls = start_urls if start_urls is not None else (testbed.start_urls if testbed is not None else [])
    argv = [PYTHON, "-m", "scrapy", "crawl", spider]
    if urls:
        argv += ["-a", "start_urls=" + ",".join(urls)]
    argv += list(extra_args)
    penv = dict(os.environ)
    penv.update(env or {})
    penv["SCRAPY_SETTINGS_MODULE"] = module
    penv["PYTHONPATH"] = os.pathsep.join([str(run_dir), str(ROOT)] + [p for p in [penv.get("PYTHONPATH")] if p])
    with open(run_dir / "crawl.log", "wb") as log:
        proc = CrawlProcess(
            argv,
            cwd=ROOT,
            env=penv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    proc.run_dir = run_dir
    proc.started = time.monotonic()
    proc.crawl_argv = argv
    return proc


def run_crawl(
    testbed: Any,
    settings: dict[str, Any] | None,
    tmp_path: Path,
    spider: str = "catalog",
    timeout: float = 120,
    extra_args: list[str] | tuple[str, ...] = (),
    start_urls: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> CrawlResult:
    """Run a crawl to its end and return its returncode, items, stats and log."""
    return start_crawl(testbed, settings, tmp_path, spider, extra_args, start_urls, env).finish(timeout)


def wait_live_workers(job: str, url: str, n: int, procs: list[CrawlProcess], timeout: float = 120) -> list[str]:
    """Wait until ``n`` workers of ``job``'s current run (frontier at ``url``) beat; their
    names. Fails when a crawl of ``procs`` exits first or after ``timeout`` s."""
    from scrapy_scale.frontier import FrontierError, open_store

    deadline = time.monotonic() + hang_guard(timeout)
    live: list[str] = []
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a crawl exited before {n} workers joined:\n{p.result().log[-3000:]}")
        try:
            store = open_store(url, job)
            try:
                live = store.status().live_workers(time.time())
            finally:
                store.close()
        except FrontierError:  # the job is not there yet
            live = []
        if len(live) >= n:
            return live
        time.sleep(0.2)
    raise AssertionError(f"{len(live)} of {n} workers joined within {hang_guard(timeout):.0f} s: {live}")
