"""What ``scrapy scale report|replay|review JOB`` do (plain Python; the command is glue)."""

from __future__ import annotations

from typing import Any

from scrapy_scale import config
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.errors import ScaleError
from scrapy_scale.quality import report_build
from scrapy_scale.quality import settings as quality_settings
from scrapy_scale.quality.history import RunRecord
from scrapy_scale.redact import redact_url
from scrapy_scale.storage import settings as storage_settings


class QualityError(ScaleError, RuntimeError):
    """A quality command cannot do what was asked; the message says why."""


def _run(runs: list[RunRecord], job: str, run: str | None, where: str) -> RunRecord:
    if not runs:
        raise QualityError(
            f"no quality history of job {job!r} in {where} (no crawl of it has ended there with the quality report on)"
        )
    if run is None:
        return runs[-1]
    for r in runs:
        if r.run_id == str(run):
            return r
    raise QualityError(f"job {job!r} has no run {run!r} in the history; runs: {', '.join(r.run_id for r in runs)}")


def report(settings: Any, job: str, run: str | None = None) -> dict[str, Any]:
    """Rebuild the report of ``run`` (default: the job's last run) from the history and the
    store, write it beside the job's data (as the end of a crawl does) and return it."""
    from scrapy_scale.quality.pipeline import store_url
    from scrapy_scale.quality.raw_pages import SnapshotDir

    config.validate_all(settings, read_sources=False)  # the egress source is not opened
    h = report_build.open_history(settings)
    try:
        runs = h.runs(job)
        rec = _run(runs, job, run, redact_url(store_url(settings)))
        scan = report_build.scan_store(settings, job, rec.run_id)
        index = SnapshotDir.for_job(settings, job).index()
        rep = report_build.build(
            job,
            rec.run_id,
            runs,
            report_build.thresholds(settings),
            scan,
            quality_settings.SAMPLE_SIZE.get(settings),
            storage_settings.FIELDS.get(settings),
            snapshots=index,
            keep=h.keep,
        )
        h.put_report(job, rec.run_id, rep["ok"], rep["failed"])
    finally:
        h.close()
    rep["paths"] = report_build.write(rep, report_build.quality_dir(settings, job))
    return rep


def format_report(rep: dict[str, Any]) -> str:
    lines = [rep["summary"]]
    for c in rep["checks"]:
        mark = {True: "pass", False: "FAIL", None: "info"}[c["ok"]]
        lines.append(f"  {mark:<4} {c['name']}: {c['message']}")
    for r in rep.get("reviews") or []:  # what `review --verdicts` recorded (it says the report shows it)
        lines.append(
            f"  review of run {r.get('run_id')}: {r.get('judged', 0)} row(s) judged, {r.get('ok', 0)} ok, "
            f"{r.get('bad', 0)} bad"
        )
    lines.append(f"report: {rep['paths'][1]} (JSON: {rep['paths'][0]})")
    return "\n".join(lines)


def replay(
    settings: Any,
    job: str,
    cls: str = "parse_failed",
    spider: str | None = None,
    spider_args: dict[str, str] | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run the spider's callbacks over the job's snapshots of class ``cls`` (no network),
    judged with the settings recorded with them (``-s`` overrides), store their items through
    the pipelines, mark the requests that came out done in the frontier and drop the
    snapshots of the requests that are done. ``dry_run``: judge, write nothing. Blocking:
    starts (and stops) a Twisted reactor, so it runs once per process."""
    from scrapy.crawler import CrawlerProcess
    from scrapy.utils.misc import load_object

    from scrapy_scale.quality import replay as R
    from scrapy_scale.quality.raw_pages import SnapshotDir
    from scrapy_scale.quality.replay_plan import plan

    config.validate_all(settings, read_sources=False)  # the egress source is not opened
    snaps = SnapshotDir.for_job(settings, job)
    p = plan(snaps, cls, settings)
    if not p.loaded:
        why = f"; {len(p.unreadable)} unreadable file(s) kept" if p.unreadable else ""
        raise QualityError(f"no snapshot of class {cls!r} for job {job!r} in {snaps.folder}{why}")
    loaded = p.loaded
    spider = spider or next((s["spider"] for s in loaded.values() if isinstance(s.get("spider"), str)), None) or job
    s = settings.copy()
    prio = "cmdline"
    for name, value in p.settings.items():  # the crawl's judging settings, above the project's
        s.set(name, value, priority=prio)
    s.set("SCALE_JOB", job, priority=prio)
    s.set(R.SETTING, loaded, priority=prio)
    s.set("SCHEDULER", "scrapy.core.scheduler.Scheduler", priority=prio)
    s.set("ROBOTSTXT_OBEY", False, priority=prio)
    s.set("JOBDIR", None, priority=prio)
    s.set("LOG_ENABLED", True, priority=prio)
    components: list[tuple[str, str, int | None]] = [
        ("SPIDER_MIDDLEWARES", "scrapy_scale.quality.replay.ReplaySpiderMiddleware", 1000),
        ("DOWNLOADER_MIDDLEWARES", "scrapy_scale.quality.replay.ReplayDownloaderMiddleware", 1),
        ("EXTENSIONS", "scrapy_scale.quality.replay.ReplayTracker", 0),
        ("EXTENSIONS", "scrapy_scale.quality.QualityReport", None),
        ("EXTENSIONS", "scrapy_scale.quality.raw_pages.Snapshots", None),
    ]
    if dry_run:  # judged where the validation runs; nothing validated, quarantined or stored
        components += [
            ("ITEM_PIPELINES", "scrapy_scale.quality.ValidationPipeline", None),
            ("ITEM_PIPELINES", "scrapy_scale.storage.StorePipeline", None),
            ("ITEM_PIPELINES", "scrapy_scale.quality.replay.ReplayJudge", 800),
        ]
    for dict_name, path, order in components:
        s.set_in_component_priority_dict(dict_name, load_object(path), order)
    process = CrawlerProcess(s)
    crawler = process.create_crawler(spider)
    process.crawl(crawler, **(spider_args or {}))
    process.start()
    state = R.state_of(crawler)
    if crawler.stats is None or crawler.stats.get_value(K.SCRAPY_FINISH_REASON) is None:
        raise QualityError("the replay crawl did not run (see the log above)")
    done = state.done()
    marked, kept = _settle(settings, job, snaps, {n: loaded[n]["fingerprint"] for n in done}, dry_run)
    failing = {
        n: (state.item_failures.get(n) or ":".join(state.outcomes.get(n, ("fatal", "not replayed"))))
        for n in loaded
        if n not in done
    }
    failing.update(kept)
    return {
        "job": job,
        "class": cls,
        "spider": spider,
        "dry_run": dry_run,
        "snapshots": len(loaded),
        "done": len(done),
        "marked_done": marked,
        "removed": len(done) - len(kept),
        "items_stored": sum(state.stored.values()),
        "ignored_requests": state.ignored_requests,
        "still_failing": failing,
        "notes": p.notes,
    }


def _settle(settings: Any, job: str, snaps: Any, fps: dict[str, str], dry_run: bool) -> tuple[int, dict[str, str]]:
    """Mark the requests of the replays that came out ok done (failed ones only), then drop
    the snapshot of each request the frontier holds as done; (marked, snapshot -> why kept).
    A kill -9 between the two keeps snapshots of done requests: the next replay drops them."""
    from scrapy_scale.frontier import settings as frontier_settings
    from scrapy_scale.frontier.backends import open_store

    if not fps:
        return 0, {}
    store = open_store(frontier_settings.frontier_url(settings), job, state_dir=core_settings.STATE_DIR.get(settings))
    try:
        if dry_run:
            states = {n: store.get(fp) for n, fp in fps.items()}
            marked = sum(1 for r in states.values() if r is not None and r.get("state") == "failed")
            will = {n for n, r in states.items() if r is not None and r.get("state") in ("failed", "done")}
        else:
            marked = store.resolve(list(fps.values()))
            states = {n: store.get(fp) for n, fp in fps.items()}
            will = {n for n, r in states.items() if r is not None and r.get("state") == "done"}
    finally:
        store.close()
    kept = {}
    for n, rec in states.items():
        if n not in will:
            state = "no record" if rec is None else f"its request is {rec.get('state')}"
            kept[n] = f"came out ok, snapshot kept: {state} in the frontier, not done"
        elif not dry_run:
            _drop(snaps, n)
    return marked, kept


def _drop(snaps: Any, name: str) -> None:
    import os

    try:
        os.unlink(os.path.join(snaps.folder, name))
    except FileNotFoundError:
        pass


def format_replay(r: dict[str, Any]) -> str:
    if r.get("dry_run"):
        lines = [
            f"{r['job']}: dry run, nothing written: {r['snapshots']} snapshot(s) of class {r['class']} replayed "
            f"with spider {r['spider']} (no network request): {r['done']} would come out ok, {r['items_stored']} "
            f"item(s) would be stored, {r['marked_done']} request(s) marked done in the frontier, "
            f"{r['removed']} snapshot(s) removed"
        ]
    else:
        lines = [
            f"{r['job']}: replayed {r['snapshots']} snapshot(s) of class {r['class']} with spider {r['spider']} "
            f"(no network request): {r['done']} came out ok, {r['items_stored']} item(s) stored, "
            f"{r['marked_done']} request(s) marked done in the frontier, {r['removed']} snapshot(s) removed"
        ]
    lines += [f"  {note}" for note in r.get("notes", ())]
    if r["ignored_requests"]:
        lines.append(f"  {r['ignored_requests']} link(s) the callbacks followed were not fetched")
    for name, why in list(r["still_failing"].items())[:20]:
        lines.append(f"  still failing: {name}: {why}")
    return "\n".join(lines)


#: the verdicts a reviewer may write in the CSV's ``verdict`` column ("" = not judged)
VERDICTS = {"ok": "ok", "good": "ok", "yes": "ok", "y": "ok", "bad": "bad", "wrong": "bad", "no": "bad", "n": "bad"}
CSV_COLUMNS = ["run_id", "key", "source_url", "item_type", "snapshot", "fields", "verdict", "note"]


def review(settings: Any, job: str, run: str | None = None, verdicts: str | None = None) -> str:
    """Write the run's sample for a person to review (CSV and HTML beside the job's data), or,
    with ``verdicts``, read a filled-in CSV back into the history (the next report shows it)."""
    if verdicts:
        return read_verdicts(settings, job, verdicts)
    import csv
    import json
    import os

    from scrapy_scale.quality.html import review_page
    from scrapy_scale.quality.pipeline import store_url
    from scrapy_scale.quality.raw_pages import SnapshotDir

    config.validate_all(settings, read_sources=False)  # the egress source is not opened
    h = report_build.open_history(settings)
    try:
        rec = _run(h.runs(job), job, run, redact_url(store_url(settings)))
    finally:
        h.close()
    scan = report_build.scan_store(settings, job, rec.run_id)
    fields = storage_settings.FIELDS.get(settings)
    rows = report_build.sample(
        scan.run_rows,
        quality_settings.SAMPLE_SIZE.get(settings),
        f"{job}:{rec.run_id}",
        fields,
        SnapshotDir.for_job(settings, job).index(),
    )
    folder = report_build.quality_dir(settings, job)
    os.makedirs(folder, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in rec.run_id)
    csv_path = os.path.join(folder, f"review-{safe}.csv")
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    "run_id": rec.run_id,
                    "key": r["key"],
                    "source_url": r["source_url"],
                    "item_type": r["item_type"],
                    "snapshot": r["snapshot"] or "",
                    "fields": json.dumps(r["fields"], ensure_ascii=False, sort_keys=True, default=str),
                    "verdict": "",
                    "note": "",
                }
            )
    html_path = os.path.join(folder, f"review-{safe}.html")
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(review_page(job, rec.run_id, rows))
    return (
        f"{job}: {len(rows)} row(s) of run {rec.run_id} to review: {csv_path} (fill in the verdict column "
        f"with ok or bad, and a note if you like; then: scrapy scale review {job} --verdicts FILE) "
        f"and {html_path}"
    )


def parse_verdicts(lines: Any) -> tuple[str, dict[str, Any]]:
    """(run id, verdicts) from a filled-in review CSV."""
    import csv

    run = ""
    out: dict[str, Any] = {"judged": 0, "ok": 0, "bad": 0, "rows": []}
    for i, row in enumerate(csv.DictReader(lines), start=2):
        if not row.get("key"):
            raise QualityError(f"line {i}: no key (is it the CSV `scrapy scale review` wrote?)")
        run = run or (row.get("run_id") or "")
        if row.get("run_id") and row["run_id"] != run:
            raise QualityError(f"line {i}: run {row['run_id']!r}, but the file is about run {run!r}")
        raw = (row.get("verdict") or "").strip().lower()
        if not raw:
            continue
        if raw not in VERDICTS:
            raise QualityError(f"line {i}: verdict {row.get('verdict')!r}: write ok or bad (or leave it empty)")
        v = VERDICTS[raw]
        out["judged"] += 1
        out[v] += 1
        out["rows"].append(
            {
                "key": row["key"],
                "source_url": row.get("source_url"),
                "verdict": v,
                "note": (row.get("note") or "").strip()[:500],
            }
        )
    if not run:
        raise QualityError("the file names no run (run_id column)")
    return run, out


def read_verdicts(settings: Any, job: str, path: str) -> str:
    config.validate_all(settings, read_sources=False)  # the egress source is not opened
    try:
        with open(path, newline="", encoding="utf-8") as f:
            run, verdicts = parse_verdicts(f)
    except OSError as e:
        raise QualityError(f"cannot read {path}: {e}") from None
    h = report_build.open_history(settings)
    try:
        if not any(r.run_id == run for r in h.runs(job)):
            raise QualityError(f"job {job!r} has no run {run!r} in the history")
        h.put_verdicts(job, run, verdicts)
    finally:
        h.close()
    return (
        f"{job}: verdicts on run {run} recorded: {verdicts['judged']} judged, {verdicts['ok']} ok, "
        f"{verdicts['bad']} bad; the next report shows them"
    )
