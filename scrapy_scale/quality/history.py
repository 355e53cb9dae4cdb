"""The history of a job's runs, kept by the item store (same SQLite file / MongoDB database).

One side collection (``SCALE_QUALITY_HISTORY``, default ``<collection>_quality_runs``) holds,
per run of a job: the figures of each crawl process that took part (``figures``), the
verdict of the last report (``report``) and a reviewer's verdicts on its sample
(``verdicts``). The last ``SCALE_QUALITY_HISTORY_RUNS`` runs of each job are kept.
Blocking: call from a thread (or a command).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.quality.figures import RunFigures, merge
from scrapy_scale.shared_values import Warnings, finite
from scrapy_scale.storage.backends import DeadRow, Store, open_store

SEP = "\x1f"
logger = logging.getLogger(__name__)
#: one warning per job for figures read back that are not what a worker writes
warnings = Warnings(logger)


@dataclass
class RunRecord:
    run_id: str
    started: float
    figures: RunFigures
    #: the last report's verdict: {"ok": bool, "failed": [check names], "at": time}, or None
    report: dict[str, Any] | None = None
    #: {"ok": n, "bad": n, "rows": [{key, verdict, note}], "at": time}, or None
    verdicts: dict[str, Any] | None = None
    parts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return bool(self.report and self.report.get("ok"))


def run_order(run_id: str) -> tuple[int, float, str]:
    return (0, float(run_id), "") if run_id.isdigit() else (1, 0.0, run_id)


class History:
    def __init__(self, url: str, collection: str, table: str, keep: int = 10):
        self.store: Store = open_store(url, collection, table)
        self.keep = keep

    def open(self) -> None:
        self.store.open()

    def close(self) -> None:
        self.store.close()

    def _put(self, job: str, run_id: str, kind: str, part: str, data: Any, started: float, **extra: Any) -> None:
        doc = {"job": job, "run_id": str(run_id), "kind": kind, "part": part, "data": data, "started": started}
        self.store.dead_letter([DeadRow(SEP.join((job, str(run_id), kind, part)), {**doc, **extra})], time.time())

    def put_figures(
        self, fig: RunFigures, part: str, started: float, final: bool = False, host: str = "", pid: int = 0
    ) -> None:
        """This process's figures of the run; ``final``: it counts no more (it closed), so a
        verdict on the whole run may include them (:func:`unsettled`)."""
        self._put(fig.job, fig.run_id, "figures", part, fig.to_json(), started, final=final, host=host, pid=pid)

    def parts(self, job: str, run_id: str) -> list[dict[str, Any]]:
        """The figures rows of the run's processes (``part``, ``final``, ``host``, ``pid``)."""
        return [r for r in self._rows(job) if str(r["run_id"]) == str(run_id) and r.get("kind") == "figures"]

    def wait_settled(
        self,
        job: str,
        run_id: str,
        timeout: float,
        alive: Callable[[str, int], bool],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.2,
    ) -> list[str]:
        """Wait (at most ``timeout`` s) until every live process of the run has saved its final
        figures, so every worker judges the same whole run; the parts still unsettled then."""
        deadline = clock() + timeout
        while True:
            left = unsettled(self.parts(job, run_id), alive)
            if not left or clock() >= deadline:
                return left
            sleep(interval)

    def put_report(self, job: str, run_id: str, ok: bool, failed: list[str]) -> None:
        self._put(job, run_id, "report", "", {"ok": ok, "failed": failed, "at": time.time()}, time.time())

    def put_verdicts(self, job: str, run_id: str, verdicts: dict[str, Any]) -> None:
        self._put(job, run_id, "verdicts", "", dict(verdicts, at=time.time()), time.time())

    def _rows(self, job: str) -> list[dict[str, Any]]:
        return [r for r in self.store.dead_letters() if r.get("job") == job and "run_id" in r]

    def runs(self, job: str) -> list[RunRecord]:
        """The job's runs, oldest first."""
        by_run: dict[str, list[dict[str, Any]]] = {}
        for r in self._rows(job):
            by_run.setdefault(str(r["run_id"]), []).append(r)
        out = []
        for run_id, rows in by_run.items():
            bad: list[str] = []
            figs = [RunFigures.from_json(r.get("data"), bad) for r in rows if r.get("kind") == "figures"]
            starts = [finite(r.get("started"), 0.0) for r in rows]
            if None in starts:
                bad.append("started")
            if bad:
                warnings.warn(
                    job,
                    "fields",
                    "quality history: skipping unreadable fields of job %r run %r (%s); shared state is untrusted",
                    job,
                    run_id,
                    ", ".join(sorted(set(bad))[:5]),
                )
            started = min((t for t in starts if t is not None), default=0.0)
            rec = RunRecord(run_id, started, merge(figs), parts=len(figs))
            rec.figures.job, rec.figures.run_id = job, run_id
            for r in rows:
                data = r.get("data")
                if not isinstance(data, dict):  # not what a worker writes: read as none
                    continue
                if r.get("kind") == "report":
                    rec.report = data
                elif r.get("kind") == "verdicts":
                    rec.verdicts = data
            out.append(rec)
        out.sort(key=lambda rec: (rec.started, run_order(rec.run_id)))
        return out

    def prune(self, job: str) -> int:
        """Forget the job's runs beyond the last ``keep``; returns how many runs went."""
        runs = self.runs(job)
        old = {r.run_id for r in runs[: max(0, len(runs) - self.keep)]}
        if not old:
            return 0
        ids = [r["_id"] for r in self._rows(job) if str(r["run_id"]) in old]
        self.store.delete_dead_letters(ids)
        return len(old)


def unsettled(rows: list[dict[str, Any]], alive: Callable[[str, int], bool]) -> list[str]:
    """Parts whose figures are not final and whose process may still be counting
    (``alive(host, pid)``; a row without a usable host and pid counts as settled: it was
    written before parts said so, or is bad)."""
    out = []
    for r in rows:
        if r.get("final") is not False:
            continue
        host, pid = r.get("host"), r.get("pid")
        if not isinstance(host, str) or not host or isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            continue
        if alive(host, pid):
            out.append(str(r.get("part")))
    return out


def baseline(runs: list[RunRecord], run_id: str) -> list[RunRecord]:
    """The earlier runs to compare ``run_id`` with: the clean ones before it (all earlier
    ones when none was clean)."""
    earlier = []
    for r in runs:
        if r.run_id == str(run_id):
            break
        earlier.append(r)
    clean = [r for r in earlier if r.clean]
    return clean or earlier
