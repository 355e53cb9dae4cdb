"""What the pool's state says, for ``scrapy scale egress JOB``, ``status`` and the stats.

:func:`describe` reads the state as stored (health records by key, counts per
worker, the configured pool) so the command needs no running crawl; the live pool
describes itself the same way. Never a URL: egresses are shown by id.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from scrapy_scale import stats_keys as K
from scrapy_scale.egress.health import HEALTHY, PROBING, QUARANTINED


def _state(rec: dict[str, Any], now: float) -> str:
    u = float(rec.get("u", 0) or 0)
    return HEALTHY if not u else (QUARANTINED if now < u else PROBING)


def _score(rec: dict[str, Any]) -> float:
    g, b = float(rec.get("g", 0)), float(rec.get("b", 0))
    return round((g + 1) / (g + b + 1), 3)


def describe(state: dict[str, Any], now: float | None = None, top: int = 10) -> list[dict[str, Any]]:
    """One row per egress: state, score, requests, failures by class, quarantined until,
    the domains it is banned from (top ``top`` by blocks)."""
    now = time.time() if now is None else now
    health: dict[str, Any] = state.get("health", {})
    pool: dict[str, Any] = state.get("pool", {})
    requests: Counter[str] = Counter()
    failures: dict[str, Counter[str]] = {}
    bans: Counter[str] = Counter()
    routes: dict[str, Counter[str]] = {}  # egress -> domain -> times found at its cap
    sent: dict[str, Counter[str]] = {}
    for counts in state.get("counts", {}).values():
        for r in counts.get("routes", []):
            routes.setdefault(str(r["egress"]), Counter())[str(r["domain"])] += int(r.get("capped", 0))
            sent.setdefault(str(r["egress"]), Counter())[str(r["domain"])] += int(r.get("sent", 0))
        requests.update(counts.get("requests", {}))
        for e, c in counts.get("failures", {}).items():
            failures.setdefault(e, Counter()).update(c)
        bans.update(counts.get("bans", {}))
    ids = set(pool) | {k.partition("|")[0] for k in health} | set(requests)
    rows = []
    for e in sorted(ids, key=lambda i: (-requests[i], i)):
        rec = health.get(e, {})
        domains: list[dict[str, Any]] = []
        for k, r in health.items():
            eg, _, dom = k.partition("|")
            if eg == e and dom and (bans[k] or _state(r, now) != HEALTHY):
                domains.append(
                    {
                        "domain": dom,
                        "blocks": bans[k],
                        "state": _state(r, now),
                        "until": float(r.get("u", 0) or 0) or None,
                    }
                )
        domains.sort(key=lambda d: (-d["blocks"], d["domain"]))
        rows.append(
            {
                "egress": e,
                "group": (pool.get(e) or {}).get("group"),
                "in_pool": e in pool if pool else True,
                "state": _state(rec, now),
                "score": _score(rec),
                "requests": requests[e],
                "failures": dict(failures.get(e, {})),
                "until": float(rec.get("u", 0) or 0) or None,
                "level": int(rec.get("l", 0) or 0),
                "banned_for": domains[:top],
                "routes_at_cap": [
                    {"domain": d, "capped": n, "sent": sent[e][d]}
                    for d, n in routes.get(e, Counter()).most_common(top)
                    if n
                ],
            }
        )
    return rows


def format_rows(rows: list[dict[str, Any]], now: float | None = None) -> str:
    now = time.time() if now is None else now
    if not rows:
        return "no egress state recorded for this job"
    sizes = Counter(r["state"] for r in rows if r["in_pool"])
    out = ["egresses: " + ", ".join(f"{n} {s}" for s, n in sorted(sizes.items()))]
    for r in rows:
        fails = ", ".join(f"{c} {n}" for c, n in sorted(r["failures"].items())) or "no failures"
        until = (
            f", until {time.strftime('%H:%M:%S', time.localtime(r['until']))}"
            if r["until"] and r["state"] != HEALTHY
            else ""
        )
        group = f" [{r['group']}]" if r["group"] else ""
        gone = " (no longer in the pool)" if not r["in_pool"] else ""
        out.append(
            f"  {r['egress']}{group}{gone}: {r['state']}{until}, score {r['score']:.2f}, "
            f"{r['requests']} request(s), {fails}"
        )
        for d in r["banned_for"]:
            left = (
                f" until {time.strftime('%H:%M:%S', time.localtime(d['until']))}"
                if d["until"] and d["state"] != HEALTHY
                else ""
            )
            out.append(f"      {d['domain']}: {d['state']}{left}, {d['blocks']} block(s)")
        for rt in r["routes_at_cap"]:
            out.append(f"      route to {rt['domain']}: {rt['sent']} sent, at its cap {rt['capped']} time(s)")
    return "\n".join(out)


def bounded_stats(pool: Any, top: int) -> dict[str, int]:
    """Per-egress stats for the ``top`` busiest egresses; the rest summed under ``other``."""
    out: Counter[str] = Counter()
    busiest = [e for e, _ in pool.requests.most_common()]
    named = set(busiest[:top])
    for e, n in pool.requests.items():
        out[K.egress_requests(e if e in named else "other")] += n
    for e, c in pool.failures.items():
        for cls, n in c.items():
            out[K.egress_failures(e if e in named else "other", cls)] += n
    for r in pool.routes.pressure(top):
        if r["capped"]:
            out[K.egress_route_capped(str(r["egress"]), str(r["domain"]))] = int(r["capped"])
    return dict(out)


def read_job(settings: Any, job: str) -> list[dict[str, Any]] | None:
    """The rows of ``job``'s stored pool state, or None when no crawl has stored any."""
    from scrapy_scale.egress.shared import open_state, sqlite_exists

    if not sqlite_exists(settings):
        return None
    store = open_state(settings, job)
    try:
        state = store.read_all()
    finally:
        store.close()
    if not any(state.values()):
        return None
    return describe(state)
