"""The report as one self-contained HTML page (inline CSS and SVG, no external assets):
the verdict, every check, the per-field missing rates over the last runs drawn as lines,
the failure classes, the sample for review."""

from __future__ import annotations

import html
import json
import time
from typing import Any

from scrapy_scale.quality.checks import pct

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 6px} h2{font-size:17px;margin:26px 0 8px}
.verdict{display:inline-block;padding:6px 14px;border-radius:6px;color:#fff;font-weight:bold;font-size:18px}
.pass{background:#2e7d32}.fail{background:#c62828}.info{background:#757575}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f0f0f0}tr.bad td{background:#fde8e8}.num{text-align:right}
.small{color:#666;font-size:12px} svg{background:#fafafa;border:1px solid #ddd}
"""


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def missing_chart(history: list[dict[str, Any]], width: int = 760, height: int = 260) -> str:
    """Lines of each field's missing rate (y) over the runs (x), as inline SVG."""
    fields = sorted({f for h in history for f in h.get("missing_rates", {})})
    if not fields or not history:
        return "<p class='small'>No critical fields were checked (SCALE_CRITICAL_FIELDS).</p>"
    left, right, top, bottom = 50, 160, 16, 36
    w, h = width - left - right, height - top - bottom
    top_rate = max([h_.get("missing_rates", {}).get(f, 0.0) for h_ in history for f in fields] + [0.1])
    top_rate = min(1.0, (int(top_rate * 10) + 1) / 10)
    n = len(history)

    def x(i: int) -> float:
        return left + (w * i / (n - 1) if n > 1 else w / 2)

    def y(rate: float) -> float:
        return top + h - h * rate / top_rate

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="missing rate per field over the last runs">'
    ]
    for k in range(6):
        rate = top_rate * k / 5
        parts.append(
            f'<line x1="{left}" x2="{left + w}" y1="{y(rate):.1f}" y2="{y(rate):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y(rate) + 4:.1f}" font-size="11" text-anchor="end">'
            f"{100 * rate:.0f}%</text>"
        )
    for i, run in enumerate(history):
        label = _e(run["run_id"])[:14]
        color = "#222" if run.get("clean", True) else "#c62828"
        parts.append(
            f'<text x="{x(i):.1f}" y="{top + h + 16}" font-size="11" text-anchor="middle" fill="{color}">{label}</text>'
        )
    for j, f in enumerate(fields):
        c = COLORS[j % len(COLORS)]
        pts = [
            (x(i), y(run.get("missing_rates", {}).get(f, 0.0)))
            for i, run in enumerate(history)
            if f in run.get("missing_rates", {})
        ]
        if len(pts) > 1:
            parts.append(
                f'<polyline fill="none" stroke="{c}" stroke-width="2.5" points="'
                + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
                + '"/>'
            )
        for a, b in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="4" fill="{c}"/>')
        ly = top + 14 + 18 * j
        parts.append(
            f'<rect x="{left + w + 14}" y="{ly - 9}" width="12" height="12" fill="{c}"/>'
            f'<text x="{left + w + 32}" y="{ly + 1}" font-size="12">{_e(f)}</text>'
        )
    parts.append(
        f'<text x="{left + w / 2:.1f}" y="{height - 4}" font-size="11" text-anchor="middle" '
        'fill="#666">run (red: a run that failed its checks)</text></svg>'
    )
    return "".join(parts)


def _checks(report: dict[str, Any]) -> str:
    rows = ["<tr><th>check</th><th>result</th><th>value</th><th>compared with</th><th>what it says</th></tr>"]
    for c in report["checks"]:
        res = {True: "pass", False: "FAIL", None: "info"}[c["ok"]]
        cls = " class='bad'" if c["ok"] is False else ""
        ratio = c["name"].startswith("items_per_request")  # items per request, not a share

        def fmt(v: Any, ratio: bool = ratio) -> str:
            if isinstance(v, float):
                return f"{v:.2f}" if ratio else pct(v)
            return _e(v)

        shown, cws = fmt(c["value"]), fmt(c["compared_with"])
        rows.append(
            f"<tr{cls}><td>{_e(c['name'])}</td><td>{res}</td><td class='num'>{shown}</td>"
            f"<td>{cws} <span class='small'>{_e(c['how'])}</span></td><td>{_e(c['message'])}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _classes(report: dict[str, Any]) -> str:
    hist = report["history"]
    classes = sorted({c for h in hist for c in h.get("class_shares", {})})
    if not classes:
        return "<p class='small'>No outcomes were recorded.</p>"
    head = "<tr><th>class</th>" + "".join(f"<th>run {_e(h['run_id'])[:14]}</th>" for h in hist) + "</tr>"
    body = "".join(
        "<tr><td>"
        + _e(c)
        + "</td>"
        + "".join(f"<td class='num'>{pct(h.get('class_shares', {}).get(c, 0.0))}</td>" for h in hist)
        + "</tr>"
        for c in classes
    )
    return "<table>" + head + body + "</table>"


def _sample(report: dict[str, Any]) -> str:
    rows = report.get("sample") or []
    if not rows:
        return "<p class='small'>No stored row of this run to sample.</p>"
    out = ["<tr><th>#</th><th>key</th><th>source</th><th>fields</th><th>snapshot</th></tr>"]
    for i, r in enumerate(rows, 1):
        url = r.get("source_url")
        link = f"<a href='{_e(url)}'>{_e(url)}</a>" if url else "-"
        snap = f"<a href='{_e(r['snapshot'])}'>raw</a>" if r.get("snapshot") else "-"
        out.append(
            f"<tr><td>{i}</td><td>{_e(r['key'])[:16]}</td><td>{link}</td>"
            f"<td><code>{_e(json.dumps(r.get('fields'), default=str, ensure_ascii=False)[:400])}</code></td>"
            f"<td>{snap}</td></tr>"
        )
    return "<table>" + "".join(out) + "</table>"


def _reviews(report: dict[str, Any]) -> str:
    revs = report.get("reviews") or []
    if not revs:
        return "<p class='small'>No review yet (<code>scrapy scale review JOB</code>, then <code>--verdicts FILE</code>).</p>"
    out = ["<tr><th>run</th><th>rows judged</th><th>ok</th><th>bad</th><th>notes</th></tr>"]
    for r in revs:
        notes = "; ".join(f"{x.get('key', '')[:10]}: {x.get('note')}" for x in r.get("rows", []) if x.get("note"))
        out.append(
            f"<tr><td>{_e(r.get('run_id'))}</td><td class='num'>{_e(r.get('judged'))}</td>"
            f"<td class='num'>{_e(r.get('ok'))}</td><td class='num'>{_e(r.get('bad'))}</td>"
            f"<td>{_e(notes[:500])}</td></tr>"
        )
    return "<table>" + "".join(out) + "</table>"


def render(report: dict[str, Any]) -> str:
    ok = report["ok"]
    verdict = "<span class='verdict pass'>PASS</span>" if ok else "<span class='verdict fail'>FAIL</span>"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report["generated_at"]))
    fig = report["figures"]
    items = sum(fig.get("stored", {}).values())
    store = report.get("store") or {}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Quality report: {_e(report["job"])} run {_e(report["run_id"])}</title>
<style>{CSS}</style></head><body>
<h1>Quality report: job {_e(report["job"])}, run {_e(report["run_id"])}</h1>
<p>{verdict} &nbsp; <span class="small">generated {when}; compared with run(s)
{_e(", ".join(report.get("baseline_runs") or []) or "none (first run)")}</span></p>
<p>{_e(report["summary"])}</p>
<p class="small">{items} items stored, {fig.get("validated", 0)} validated, {fig.get("quarantined", 0)} quarantined;
{sum(fig.get("classes", {}).values())} requests; store rows of the job: {_e(store.get("rows", "-"))}</p>
<h2>Missing rate of each critical field, last runs</h2>
{missing_chart(report["history"])}
<h2>Checks</h2>
{_checks(report)}
<h2>Failure classes (share of requests)</h2>
{_classes(report)}
<h2>Sample for review ({len(report.get("sample") or [])} rows)</h2>
{_sample(report)}
<h2>Reviews</h2>
{_reviews(report)}
</body></html>
"""


def review_page(job: str, run_id: str, rows: list[dict[str, Any]]) -> str:
    """The sample as a page a reviewer reads beside the CSV they fill in."""
    report = {"sample": rows}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Review: {_e(job)} run {_e(run_id)}</title>
<style>{CSS}</style></head><body>
<h1>Review: job {_e(job)}, run {_e(run_id)}</h1>
<p class="small">Judge each row against its source page; write <b>ok</b> or <b>bad</b> in the
<code>verdict</code> column of the CSV (and a note), then
<code>scrapy scale review {_e(job)} --verdicts FILE</code>.</p>
{_sample(report)}
</body></html>
"""
