"""Build a run's consistency report from the history and the item store (blocking, no
reactor): used at the end of a crawl and by ``scrapy scale report JOB``.

The report is plain JSON (:func:`build`); :mod:`scrapy_scale.quality.html` draws it.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy_scale import config
from scrapy_scale.config import core_settings
from scrapy_scale.quality import settings as quality_settings
from scrapy_scale.quality.checks import StoreScan, Thresholds, evaluate, failed
from scrapy_scale.quality.figures import RunFigures
from scrapy_scale.quality.history import History, RunRecord, baseline
from scrapy_scale.quality.validate import content_hash
from scrapy_scale.storage import settings as storage_settings
from scrapy_scale.storage.backends import open_store


def quality_dir(settings: Any, job: str) -> str:
    d = quality_settings.DIR.get(settings)
    if d:
        return os.path.abspath(d)
    folder = core_settings.state_folder(settings)
    return os.path.abspath(os.path.join(folder, "quality", job))


def history_name(settings: Any) -> str:
    return quality_settings.HISTORY.get(settings) or (storage_settings.COLLECTION.get(settings) + "_quality_runs")


def open_history(settings: Any) -> History:
    from scrapy_scale.quality.pipeline import store_url

    h = History(
        store_url(settings),
        storage_settings.COLLECTION.get(settings),
        history_name(settings),
        quality_settings.HISTORY_RUNS.get(settings),
    )
    h.open()
    return h


def thresholds(settings: Any) -> Thresholds:
    return Thresholds(
        expect=quality_settings.EXPECT.get(settings),
        ratio_tolerance=quality_settings.RATIO_TOLERANCE.get(settings),
        max_rise=quality_settings.MAX_RISE.get(settings),
        max_invalid_rate=quality_settings.MAX_INVALID.get(settings),
        max_duplicate_rate=quality_settings.MAX_DUPLICATES.get(settings),
        max_empty_rate=quality_settings.MAX_EMPTY.get(settings),
        max_parse_failed_rate=quality_settings.MAX_PARSE_FAILED.get(settings),
    )


@dataclass
class ScanResult:
    scan: StoreScan
    #: rows of the run (bookkeeping fields kept), for the sample
    run_rows: list[dict[str, Any]]


def _dups(values: Iterable[Any]) -> int:
    return sum(n - 1 for n in Counter(v for v in values if v is not None).values() if n > 1)


def scan_rows(
    docs: Iterable[Mapping[str, Any]],
    job: str,
    run_id: str,
    fields: Mapping[str, str],
    dup_key: list[str],
    content_fields: list[str],
) -> ScanResult:
    """One pass over the store's documents: the job's rows, their duplicates, the run's rows."""
    rows = 0
    keys: list[Any] = []
    hashes: list[Any] = []
    run_rows = []
    for d in docs:
        if d.get(fields["job"]) != job:
            continue
        rows += 1
        if dup_key:
            vals = [d.get(f) for f in dup_key]
            keys.append(None if any(v is None for v in vals) else json.dumps(vals, sort_keys=True, default=str))
        if content_fields:
            hashes.append(content_hash(d, content_fields))
        if str(d.get(fields["run_id"])) == str(run_id):
            run_rows.append(dict(d))
    return ScanResult(
        StoreScan(rows, _dups(keys) if dup_key else None, _dups(hashes) if content_fields else None), run_rows
    )


def scan_store(settings: Any, job: str, run_id: str) -> ScanResult:
    from scrapy_scale.quality.pipeline import store_url

    s = config.get
    store = open_store(
        store_url(settings),
        s(settings, "SCALE_STORE_COLLECTION"),
        s(settings, "SCALE_STORE_DEAD_LETTER"),
        s(settings, "SCALE_STORE_FIELDS"),
    )
    store.open()
    try:
        return scan_rows(
            store.documents(),
            job,
            run_id,
            s(settings, "SCALE_STORE_FIELDS"),
            s(settings, "SCALE_QUALITY_DUPLICATE_KEY"),
            s(settings, "SCALE_QUALITY_CONTENT_FIELDS"),
        )
    finally:
        store.close()


def sample(
    rows: list[dict[str, Any]], n: int, seed: str, fields: Mapping[str, str], snapshots: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """``n`` rows drawn with ``random.Random(seed)``: the same run gives the same sample."""
    rows = sorted(rows, key=lambda d: str(d.get("_id")))
    picked = random.Random(seed).sample(rows, min(n, len(rows)))
    meta = set(fields.values()) | {"_id"}
    out = []
    for d in picked:
        url = d.get(fields["source_url"])
        out.append(
            {
                "key": str(d.get("_id")),
                "source_url": url,
                "item_type": d.get(fields["item_type"]),
                "fields": {k: v for k, v in d.items() if k not in meta},
                "snapshot": (snapshots or {}).get(url) if url else None,
            }
        )
    return out


def build(
    job: str,
    run_id: str,
    runs: list[RunRecord],
    t: Thresholds,
    scan: ScanResult | None,
    sample_size: int,
    fields: Mapping[str, str],
    current: RunFigures | None = None,
    snapshots: Mapping[str, str] | None = None,
    keep: int = 10,
) -> dict[str, Any]:
    """The report of ``run_id`` (its figures: ``current``, else the history's)."""
    rec = next((r for r in runs if r.run_id == str(run_id)), None)
    fig = current if current is not None else (rec.figures if rec is not None else RunFigures(job, str(run_id)))
    base = baseline(runs, str(run_id))
    checks = evaluate(fig, [b.figures for b in base], t, scan.scan if scan else None)
    bad = failed(checks)
    upto = [r for r in runs if r.run_id != str(run_id)]
    upto = [r for r in upto if (r.started, r.run_id) <= ((rec.started, rec.run_id) if rec else (time.time(), ""))]
    shown = (upto + [rec or RunRecord(str(run_id), time.time(), fig)])[-keep:]
    series = []
    for r in shown:
        f = fig if r.run_id == str(run_id) else r.figures
        series.append(
            {
                "run_id": r.run_id,
                "started": r.started,
                "clean": r.clean if r.run_id != str(run_id) else not bad,
                "missing_rates": f.missing_rates(),
                "class_shares": f.class_shares(),
                "items": sum(f.stored.values()),
                "requests": f.final,
            }
        )
    reviews = [dict(r.verdicts, run_id=r.run_id) for r in runs if r.verdicts]
    return {
        "job": job,
        "run_id": str(run_id),
        "generated_at": time.time(),
        "ok": not bad,
        "failed": [c.name for c in bad],
        "summary": summary_line(job, str(run_id), checks),
        "checks": [c.to_json() for c in checks],
        "figures": fig.to_json(),
        "baseline_runs": [b.run_id for b in base],
        "history": series,
        "store": None
        if scan is None
        else {
            "rows": scan.scan.rows,
            "duplicates_by_key": scan.scan.duplicates_by_key,
            "duplicates_by_content": scan.scan.duplicates_by_content,
            "run_rows": len(scan.run_rows),
        },
        "sample": sample(scan.run_rows, sample_size, f"{job}:{run_id}", fields, snapshots) if scan else [],
        "reviews": reviews,
    }


def summary_line(job: str, run_id: str, checks: list[Any]) -> str:
    bad = failed(checks)
    if not bad:
        n = sum(1 for c in checks if c.ok)
        return f"quality report of job {job!r} run {run_id}: every check passed ({n} checks)"
    return f"quality report of job {job!r} run {run_id}: {len(bad)} check(s) FAILED: " + "; ".join(
        c.message for c in bad
    )


def write(report: dict[str, Any], folder: str) -> tuple[str, str]:
    """``report-<run>.json`` and ``.html`` in ``folder``, and ``report.json``/``report.html``
    (the latest); returns the two per-run paths."""
    from scrapy_scale.quality.html import render

    os.makedirs(folder, exist_ok=True)
    run = "".join(c if c.isalnum() or c in "-_." else "_" for c in report["run_id"])
    out = []
    for ext, text in (("json", json.dumps(report, indent=1, sort_keys=True, default=str)), ("html", render(report))):
        for name in (f"report-{run}.{ext}", f"report.{ext}"):
            path = os.path.join(folder, name)
            # a name of this process's own: the workers of one run write their reports at once
            tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        out.append(os.path.join(folder, f"report-{run}.{ext}"))
    return out[0], out[1]
