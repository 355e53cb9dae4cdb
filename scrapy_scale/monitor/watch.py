"""``scrapy scale watch JOB``: a live view of a job from any machine that reaches its
frontier; ``scrapy scale status JOB`` prints the same numbers once.

What it reads: the frontier's ``status()`` (job-wide counts, oldest pending age, average
wait, workers), and the snapshots the workers publish next to it
(:mod:`scrapy_scale.monitor.worker_status`: their requests by class, rates, the named domains'
attempts, blocks and rate limits, the egress pool, live browser contexts). The job's rate
of finished requests comes from the frontier's done + failed counts between refreshes
(:class:`~scrapy_scale.monitor.progress.RateWindow`), and before the second refresh from
the workers' own rates; the ETA divides what is left by it, and is no sooner than the
latest delayed request may go and the last paused site's pause ends.

:func:`view` gathers one refresh as plain data and :func:`text_lines` turns it into
lines (for ``status``), both testable without a terminal; :func:`renderable` draws it with
rich (the ``all`` extra), which the live view redraws in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from scrapy_scale.monitor.progress import (
    RateWindow,
    delayed_text,
    eta_seconds,
    format_eta,
    progress_line,
    remaining,
    waiting,
)
from scrapy_scale.monitor.worker_status import Merged, Sink, merge, valid
from scrapy_scale.throttle.status import format_paused

#: domains shown in each "top" table
TOP = 5


def view(
    status: Mapping[str, Any], docs: list[Any], rate: RateWindow | None = None, now: float | None = None
) -> dict[str, Any]:
    """One refresh: the frontier's status, the workers' merged snapshots (``docs`` as a
    sink reads them: decoded and checked here, by :func:`valid`), rates and ETA."""
    now = time.time() if now is None else now
    merged = merge(valid(docs, now))
    counts = dict(status.get("counts") or {})
    #: the paused sites (scrapy_scale.throttle.status.PausedSites), when the caller read them
    paused = list(status.get("paused") or [])
    finished_rate: float | None = None
    if rate is not None:
        rate.add(time.monotonic(), int(counts.get("done", 0)) + int(counts.get("failed", 0)))
        finished_rate = rate.rate()
    if finished_rate is None and merged["finished_per_min"] is not None:
        finished_rate = merged["finished_per_min"] / 60
    return {
        "job": status.get("job"),
        "status": dict(status),
        "counts": counts,
        "merged": merged,
        "finished_rate": finished_rate,
        "eta": eta_seconds(remaining(counts), finished_rate, waiting(status, [p["until"] for p in paused], now))
        if counts
        else None,
        "paused": paused,
        #: the routes at their learned capacity (scrapy_scale.throttle.status.format_routes)
        "routes": status.get("routes") or "",
    }


def top_domains(merged: Merged, key: str, n: int = TOP) -> list[tuple[str, int, int, float]]:
    """(domain, count of ``key``, attempts, ratio) for the domains with the most ``key``."""
    rows = []
    for name, d in merged["domains"].items():
        k, attempts = d[key], d["attempts"]
        if k:
            rows.append((name, k, attempts, k / attempts if attempts else 0.0))
    rows.sort(key=lambda r: (-r[3], -r[1], r[0]))
    return rows[:n]


def text_lines(v: Mapping[str, Any]) -> list[str]:
    """The numbers as text lines (``scrapy scale status`` prints them under the status)."""
    m = v["merged"]
    pages = m["pages_per_min"] / 60 if m["pages_per_min"] is not None else None
    items = m["items_per_min"] / 60 if m["items_per_min"] is not None else None
    paused = v.get("paused") or []
    retries = v["status"].get("delayed_retries")
    lines = ["progress: " + progress_line(v["counts"] or None, pages, items, v["eta"], 0, 0, retries, len(paused))]
    if not m["workers"]:
        lines.append("workers' numbers: none published (no worker running, or SCALE_WATCH_INTERVAL = 0)")
        return lines
    req = ", ".join(f"{k} {n:,}" for k, n in sorted(m["requests"].items()) if n) or "none"
    lines.append(f"workers publishing: {len(m['workers'])} ({', '.join(sorted(m['workers']))})")
    lines.append(f"requests (this run's workers): {req}")
    retries = ", ".join(f"{k} {n:,}" for k, n in sorted(m["retries"].items()) if n)
    if retries:
        lines.append(f"retries: {retries}")
    lines.append(f"items stored: {m['items_stored']:,}, dead-lettered: {m['items_dead_lettered']:,}")
    for key, title in (("blocked", "top domains by block rate"), ("rate_limited", "top domains by rate limiting")):
        rows = top_domains(m, key)
        if rows:
            lines.append(f"{title}: " + ", ".join(f"{d} {r:.0%} ({k:,}/{a:,})" for d, k, a, r in rows))
    if m["egress_pool"]:
        lines.append("egress pool: " + ", ".join(f"{s} {n}" for s, n in sorted(m["egress_pool"].items())))
    lines.append(f"live browser contexts: {m['browser_contexts']}, download slots: {m['download_slots']}")
    return lines


def renderable(v: Mapping[str, Any]) -> Any:
    """The live view (rich)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    st, m, c = v["status"], v["merged"], v["counts"]
    run = st.get("run") or {}
    # the title on a line of its own and the frontier's URL (any length) under it: in 80
    # columns the URL wrapped the title; the table holds numbers only, for the same reason
    head = Text.assemble(
        ("scrapy-scale ", "bold"),
        (f"job {v['job']}", "bold cyan"),
        f"  run {run.get('id', '-')}: {run.get('state', 'none yet')}",
    )
    where = Text(f"frontier {st.get('frontier', '')}", style="dim", overflow="fold", no_wrap=True)
    queue = Table(title="frontier (job-wide)", show_edge=False)
    for col in ("pending", "delayed", "leased", "done", "failed", "dead letters"):
        queue.add_column(col, justify="right")
    delayed = int(c.get("delayed", 0))
    queue.add_row(
        *(f"{int(c.get(k, 0)):,}" for k in ("pending", "delayed", "leased", "done", "failed")),
        f"{int(st.get('dead_letters') or 0):,}",
    )
    rate = v["finished_rate"]
    pace = Text(
        f"finished/min {_num(None if rate is None else rate * 60)}   pages/min {_num(m['pages_per_min'])}   "
        f"items/min {_num(m['items_per_min'])}   ETA {format_eta(v['eta'])}\n"
        f"oldest pending {_secs(st.get('oldest_pending_age'))}   average wait {_secs(st.get('average_wait'))}"
    )
    parts: list[Any] = [head, where, queue]
    if delayed and st.get("delayed_retries") is not None:
        parts.append(Text(delayed_text(delayed, st.get("delayed_retries"))))
    parts.append(pace)
    paused = format_paused(v.get("paused") or [], time.time())
    if paused:
        parts.append(Text(paused))
    if v.get("routes"):
        parts.append(Text(v["routes"].strip()))
    if st.get("failed_by_class"):
        parts.append(Text("failed by class: " + ", ".join(f"{k} {n:,}" for k, n in st["failed_by_class"].items())))
    req = Table(title=f"requests by class ({len(m['workers'])} workers publishing)", show_edge=False)
    classes = sorted(set(m["requests"]) | set(m["retries"]))
    for cls in classes:
        req.add_column(cls, justify="right")
    if classes:
        req.add_row(*(f"{m['requests'].get(k, 0):,} (+{m['retries'].get(k, 0):,} retried)" for k in classes))
        parts.append(req)
    for key, title in (("blocked", "top domains by block rate"), ("rate_limited", "top domains by rate limiting")):
        rows = top_domains(m, key)
        if rows:
            t = Table(title=title, show_edge=False)
            for col in ("domain", key, "attempts", "ratio"):
                t.add_column(col, justify="left" if col == "domain" else "right")
            for d, k, a, r in rows:
                t.add_row(d, f"{k:,}", f"{a:,}", f"{r:.0%}")
            parts.append(t)
    env = f"live browser contexts {m['browser_contexts']}   download slots {m['download_slots']}"
    if m["egress_pool"]:
        env += "   egress pool: " + ", ".join(f"{s} {n}" for s, n in sorted(m["egress_pool"].items()))
    parts.append(Text(env))
    return Group(*parts)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _secs(x: Any) -> str:
    return "-" if x is None else f"{float(x):.1f}s"


def run(
    ops: Any,
    sink: Sink,
    interval: float = 2.0,
    count: int | None = None,
    out: Any = None,
    paused: Callable[[], list[dict[str, Any]]] | None = None,
    routes: Callable[[], str] | None = None,
) -> None:
    """Refresh every ``interval`` seconds (``count`` times; forever when None) until Ctrl-C.
    ``paused``: reads the job's paused sites (``scrapy_scale.throttle.status.PausedSites``);
    ``routes``: the lines about routes at their learned capacity (``format_routes``)."""
    from rich.console import Console
    from rich.live import Live

    console = Console(file=out) if out is not None else Console()
    rate = RateWindow()
    n = 0

    def frame() -> Any:
        st = ops.status()
        if paused is not None:
            st["paused"] = paused()
        if routes is not None:
            st["routes"] = routes()
        return renderable(view(st, sink.read(), rate))

    if console.is_terminal:
        with Live(frame(), console=console, refresh_per_second=4, screen=False) as live:
            n = 1
            while count is None or n < count:
                time.sleep(interval)
                live.update(frame())
                n += 1
        return
    while count is None or n < count:  # not a terminal: one frame after the other
        if n:
            time.sleep(interval)
        console.print(frame())
        console.rule()
        n += 1
