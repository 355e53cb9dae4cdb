"""A reusable harness: crawl the testbed with different settings, compare side by side.

    from benchmarks.harness import TestbedProcess, Variant, run_rounds, run_variant, table

    with TestbedProcess(hosts=10, pages=3000) as tb:          # its own process: its CPU is not counted
        m = run_variant("plain", {"ADDONS": {}}, pages=3000, hosts=10, testbed=tb)
        m.pages_per_s, m.cpu_per_1k, m.peak_rss_mib

    results = run_rounds([Variant("plain", {"ADDONS": {}}), Variant("mine", {...})],
                         pages=3000, hosts=10, rounds=3)     # interleaved, order rotated per round
    print(table(results))                                    # medians and ratios to the first variant

Every crawl is ``python -m scrapy crawl catalog`` in a subprocess (cwd = repo root, the
example project's settings, then ``settings``), run through ``tests.support.crawling.start_crawl``
(a generated settings module, so values keep their Python types; a value of None removes
a setting) in a fresh folder, so no two crawls share a frontier or an item store. The
harness waits for it with ``os.wait4``, which gives the child's own resource usage:

- ``pages_per_s``: HTTP responses (``downloader/response_count``) over the crawl's own
  ``elapsed_time_seconds`` (spider open to close; process start-up not included);
- ``cpu_per_1k``: user + system CPU seconds of the crawl process per 1,000 responses
  (start-up included: about a second per crawl, so use a few thousand pages);
- ``peak_rss_mib``: the crawl process's peak resident set size, its own ``VmHWM`` polled
  (``ru_maxrss`` would also count this benchmark process's size at ``fork``).

The testbed runs as its own process (``python -m scrapy_scale.testbed --no-log``), started
once and shared by every crawl of a run, without faults unless asked. Plain-Scrapy variants
must say ``"ADDONS": {}``: the example project enables the scrapy-scale add-on.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` as well as `python -m benchmarks.x`
    sys.path.insert(0, str(ROOT))

from tests.support.crawling import start_crawl  # noqa: E402 - needs the repo root on sys.path

PYTHON = sys.executable

#: settings of every benchmark crawl, below the variant's own: quiet, no items feed
BASE_SETTINGS: dict[str, Any] = {
    "LOG_LEVEL": "INFO",
    "FEEDS": None,  # the test helper writes an items feed; a benchmark does not need it
    "LOGSTATS_INTERVAL": 60.0,
}

Settings = Mapping[str, Any] | Callable[[str], Mapping[str, Any]]
Cleanup = Callable[[str], Mapping[str, float] | None]


@dataclass
class Metrics:
    """What one crawl measured."""

    name: str
    pages: int  # HTTP responses received
    items: int
    elapsed: float  # the crawl's own elapsed_time_seconds
    wall: float  # process start to exit
    cpu: float  # user + system seconds of the crawl process
    peak_rss_mib: float
    returncode: int
    run_dir: Path
    stats: dict[str, Any] = field(default_factory=dict, repr=False)
    #: measures a variant adds (what its cleanup returned), e.g. a server's CPU seconds
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def cpu_per_1k(self) -> float:
        return 1000 * self.cpu / self.pages if self.pages else float("nan")


@dataclass
class Variant:
    """A named set of settings. ``settings`` may be a function of a unique run id (for a
    Redis key, say); ``cleanup(run_id)`` runs after each crawl of the variant and may
    return extra measures (a dict of numbers, kept in ``Metrics.extra``)."""

    name: str
    settings: Settings
    cleanup: Cleanup | None = None


class TestbedProcess:
    """``python -m scrapy_scale.testbed`` as its own process; a context manager.

    ``pages`` is the TOTAL number of detail pages, spread evenly over ``hosts``.
    Has what ``tests.support.crawling.start_crawl`` needs of a testbed: ``start_urls`` and
    ``scrapy_settings()``.
    """

    def __init__(
        self,
        hosts: int,
        pages: int,
        seed: int = 1,
        faults: str = "",
        per_page: int = 20,
        extra_args: Sequence[str] = (),
        workdir: Path | None = None,
    ):
        self.hosts = hosts
        self.per_page = per_page
        self.pages_per_host = max(1, pages // hosts)
        self.pages = self.pages_per_host * hosts
        self.seed = seed
        self.faults = faults
        self.extra_args = list(extra_args)
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="bench-testbed-"))
        self.state_file = self.workdir / "testbed.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.state: dict[str, Any] = {}

    def start(self, timeout: float = 30) -> TestbedProcess:
        argv = [
            PYTHON,
            "-m",
            "scrapy_scale.testbed",
            "--hosts",
            str(self.hosts),
            "--pages",
            str(self.pages_per_host),
            "--seed",
            str(self.seed),
            "--no-log",
            "--per-page",
            str(self.per_page),
            "--state-file",
            str(self.state_file),
            "--summary-file",
            str(self.workdir / "served.json"),
        ]
        if self.faults:
            argv += ["--faults", self.faults]
        argv += self.extra_args
        self.log = open(self.workdir / "testbed.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while not self.state_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the testbed did not start; see {self.workdir / 'testbed.log'}")
            time.sleep(0.05)
        self.state = json.loads(self.state_file.read_text())
        return self

    @property
    def start_urls(self) -> list[str]:
        return list(self.state["start_urls"])

    def scrapy_settings(self) -> dict[str, Any]:
        return dict(self.state["settings"])

    def served(self) -> dict[str, Any]:
        """The testbed's counts of what it served (after stop())."""
        f = self.workdir / "served.json"
        return json.loads(f.read_text()) if f.exists() else {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None) is not None:
            self.log.close()

    def __enter__(self) -> TestbedProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_variant(
    name: str,
    settings: Settings,
    pages: int,
    hosts: int,
    *,
    testbed: TestbedProcess | None = None,
    workdir: Path | None = None,
    spider: str = "catalog",
    timeout: float = 900,
    env: dict[str, str] | None = None,
    cleanup: Cleanup | None = None,
    keep: bool = False,
) -> Metrics:
    """One crawl of the testbed (``pages`` detail pages in all, over ``hosts``) with
    ``settings`` on top of the example project's; returns what it measured.

    Without ``testbed`` a testbed process is started (and stopped) for this crawl alone.
    Raises RuntimeError when the crawl fails or gets fewer responses than the catalog has.
    """
    if testbed is None:
        with TestbedProcess(hosts, pages) as tb:
            return run_variant(
                name,
                settings,
                pages,
                hosts,
                testbed=tb,
                workdir=workdir,
                spider=spider,
                timeout=timeout,
                env=env,
                cleanup=cleanup,
                keep=keep,
            )
    run_id = f"{name.replace(' ', '_')}-{uuid.uuid4().hex[:8]}"
    base = Path(workdir or tempfile.mkdtemp(prefix="bench-run-")) / run_id
    merged = dict(BASE_SETTINGS)
    merged.update(settings(run_id) if callable(settings) else settings)
    t0 = time.monotonic()
    proc = start_crawl(testbed, merged, base, spider=spider, env=env)
    extra: Mapping[str, float] | None = None
    try:
        status, usage, peak_rss = wait_measured(proc.pid, timeout)
    finally:
        if cleanup is not None:
            extra = cleanup(run_id)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    res = proc.result()
    st = res.stats
    m = Metrics(
        name=name,
        pages=int(st.get("downloader/response_count", 0)),
        items=int(st.get("item_scraped_count", 0)),
        elapsed=float(st.get("elapsed_time_seconds", wall)),
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        peak_rss_mib=peak_rss,
        returncode=proc.returncode,
        run_dir=res.run_dir,
        stats=st,
        extra=dict(extra or {}),
    )
    expected = testbed.pages + testbed.hosts * -(-testbed.pages_per_host // testbed.per_page)  # details + listings
    if m.returncode != 0 or m.pages < expected:
        raise RuntimeError(
            f"{name}: crawl failed or incomplete (exit {m.returncode}, {m.pages} responses of at least "
            f"{expected}); log: {res.run_dir / 'crawl.log'}\n{res.tail(2000)}"
        )
    if not keep:
        shutil.rmtree(base, ignore_errors=True)
    return m


def wait_measured(pid: int, timeout: float) -> tuple[int, Any, float]:
    """Wait for a child (killed past ``timeout``): its exit status, its rusage, and its
    peak RSS in MiB from its own VmHWM, polled. ``ru_maxrss`` alone is not usable: Linux
    carries the RSS the child had at ``fork`` (this benchmark process's) into its maximum."""
    deadline = time.monotonic() + timeout
    hwm = 0.0
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            return status, usage, hwm
        hwm = max(hwm, vm_hwm_mib(pid))
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            _, status, usage = os.wait4(pid, 0)
            return status, usage, hwm
        time.sleep(0.02)


def vm_hwm_mib(pid: int) -> float:
    """A process's peak resident set size so far (VmHWM), in MiB; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_rounds(
    variants: Sequence[Variant],
    pages: int,
    hosts: int,
    rounds: int = 3,
    *,
    testbed: TestbedProcess | None = None,
    warmup: bool = True,
    log: Callable[[str], None] = print,
    **kwargs: Any,
) -> dict[str, list[Metrics]]:
    """Every variant once per round, interleaved, the order rotated each round (so no
    variant always runs first or last); a warm-up crawl first, not counted."""
    if testbed is None:
        with TestbedProcess(hosts, pages) as tb:
            return run_rounds(variants, pages, hosts, rounds, testbed=tb, warmup=warmup, log=log, **kwargs)
    results: dict[str, list[Metrics]] = {v.name: [] for v in variants}
    if warmup:
        v = variants[0]
        run_variant(f"{v.name} (warm-up)", v.settings, pages, hosts, testbed=testbed, cleanup=v.cleanup, **kwargs)
    for r in range(rounds):
        k = r % len(variants)
        for v in list(variants[k:]) + list(variants[:k]):
            m = run_variant(v.name, v.settings, pages, hosts, testbed=testbed, cleanup=v.cleanup, **kwargs)
            results[v.name].append(m)
            log(
                f"round {r + 1}/{rounds}  {v.name:<28} {m.pages:>7} pages  {m.pages_per_s:8.1f} pages/s  "
                f"{m.cpu_per_1k:6.2f} CPU s/1k  {m.peak_rss_mib:7.1f} MiB"
            )
    return results


def value(m: Metrics, attr: str) -> float:
    """A metric by name: an attribute of Metrics, else one of its extra measures."""
    return float(getattr(m, attr)) if hasattr(m, attr) else float(m.extra.get(attr, float("nan")))


def _median(ms: Iterable[Metrics], attr: str) -> float:
    return float(statistics.median(value(m, attr) for m in ms))


COLUMNS = [
    ("pages/s", "pages_per_s", "{:.0f}"),
    ("CPU s / 1k pages", "cpu_per_1k", "{:.2f}"),
    ("peak RSS MiB", "peak_rss_mib", "{:.0f}"),
]


def ratio(variant: Sequence[Metrics], base: Sequence[Metrics], attr: str) -> float:
    """variant / base for one metric: the median of the per-round ratios when both ran the
    same rounds (each pair ran back to back, under the same load), else the ratio of medians."""
    if len(variant) == len(base) and variant:
        pairs = [value(v, attr) / value(b, attr) for v, b in zip(variant, base, strict=True) if value(b, attr)]
        if pairs:
            return float(statistics.median(pairs))
    b = _median(base, attr)
    return _median(variant, attr) / b if b else float("nan")


def table(
    results: Mapping[str, Sequence[Metrics]], baseline: str | None = None, extra: Sequence[tuple[str, str, str]] = ()
) -> str:
    """A Markdown table: medians per variant and ratios to ``baseline`` (default: the first;
    see :func:`ratio`). ``extra``: more columns as (title, metric or extra-measure name, format)."""
    names = list(results)
    base = results[baseline or names[0]]
    cols = COLUMNS + list(extra)
    head = "| variant | runs | pages |" + "".join(f" {c} | ratio |" for c, _, _ in cols)
    out = [head, "|---|---:|---:|" + "---:|---:|" * len(cols)]
    for n in names:
        ms = results[n]
        row = f"| {n} | {len(ms)} | {int(_median(ms, 'pages'))} |"
        for _, attr, fmt in cols:
            row += f" {fmt.format(_median(ms, attr))} | {ratio(ms, base, attr):.2f} |"
        out.append(row)
    return "\n".join(out)


def spread(results: Mapping[str, Sequence[Metrics]]) -> str:
    """Per variant, every round's pages/s, CPU s/1k and RSS (to judge the noise)."""
    lines = []
    for n, ms in results.items():
        lines.append(
            f"{n}: pages/s "
            + ", ".join(f"{m.pages_per_s:.0f}" for m in ms)
            + "; CPU s/1k "
            + ", ".join(f"{m.cpu_per_1k:.2f}" for m in ms)
            + "; RSS MiB "
            + ", ".join(f"{m.peak_rss_mib:.0f}" for m in ms)
        )
    return "\n".join(lines)
