"""What the pool's state says, for ``scrapy scale egress JOB``, ``status`` and the stats.

:func:`describe` reads the state as stored (health records by key, counts per
worker, the configured pool) so the command needs no running crawl; the live pool
describes itself the same way. Never a URL: egresses are shown by id.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from scrapy_scale import stats_keys as K
from scrapy_scale.egress.health import HEALTHY, Health, clamp_note, score_note


def when(t: float, now: float | None = None) -> str:
    """A moment for a log line or a status row: ``HH:MM:SS`` today, with its date on any
    other day. Never raises (a time the calendar cannot show is shown as a number)."""
    now = time.time() if now is None else now
    try:
        at, today = time.localtime(t), time.localtime(now)
        if at[:3] == today[:3]:
            return time.strftime("%H:%M:%S", at)
        return time.strftime("%Y-%m-%d %H:%M:%S", at)
    except (OSError, OverflowError, ValueError, TypeError):
        return f"{t!r} (epoch seconds)"


def _blamed_on_egress(cls: str) -> bool:
    """Does this class count against the egress (its blame is ``egress`` or
    ``egress_domain``)? A parse failure, a 404 or a site's 429 is not the proxy's fault."""
    from scrapy_scale.outcomes.model import CLASSES, Blame, FailureClass

    try:
        return CLASSES[FailureClass(cls)].blame in (Blame.EGRESS, Blame.EGRESS_DOMAIN)
    except ValueError:
        return True  # a class this version does not know: shown, not hidden


def clean_health(
    health: dict[str, Any], now: float, longest: float = math.inf, problems: list[str] | None = None
) -> dict[str, Health]:
    """The health records that decode (:meth:`Health.from_record` with ``now`` and
    ``longest``, the SCALE_EGRESS_QUARANTINE_MAX, as a crawl reads them: a quarantine
    that ends too far ahead is clamped), as :class:`Health`; each one skipped or clamped is
    named in ``problems``."""
    out: dict[str, Health] = {}
    for k, rec in health.items():
        try:
            out[k] = Health.from_record(rec, now, longest)
        except ValueError as e:
            if problems is not None:
                problems.append(f"health record {k!r} skipped: {e}")
            continue
        note = clamp_note(rec, now, longest)
        if note and problems is not None:
            problems.append(f"health record {k!r}: {note}; shown as ending then")
        bad_score = score_note(rec)
        if bad_score and problems is not None:
            problems.append(f"health record {k!r}: {bad_score}")
    return out


def describe(
    state: dict[str, Any],
    now: float | None = None,
    top: int = 10,
    problems: list[str] | None = None,
    longest: float = math.inf,
) -> list[dict[str, Any]]:
    """One row per egress: state, score, requests, failures by class, quarantined until,
    the domains it is banned from (top ``top`` by blocks). Records that do not decode are
    skipped, and quarantines ending more than ``longest`` s after ``now`` clamped, as a
    crawl does (each named in ``problems``)."""
    now = time.time() if now is None else now
    health = clean_health(state.get("health", {}), now, longest, problems)
    pool: dict[str, Any] = {e: g if isinstance(g, dict) else {} for e, g in state.get("pool", {}).items()}
    requests: Counter[str] = Counter()
    failures: dict[str, Counter[str]] = {}
    bans: Counter[str] = Counter()
    routes: dict[str, Counter[str]] = {}  # egress -> domain -> times found at its cap
    sent: dict[str, Counter[str]] = {}
    for worker, counts in state.get("counts", {}).items():
        try:
            _add_counts(counts, requests, failures, bans, routes, sent)
        except (AttributeError, KeyError, OverflowError, TypeError, ValueError) as err:
            if problems is not None:
                problems.append(f"counts of worker {worker!r} skipped: {type(err).__name__}: {err}"[:200])
    ids = set(pool) | {k.partition("|")[0] for k in health} | set(requests)
    rows = []
    for e in sorted(ids, key=lambda i: (-requests[i], i)):
        rec = health.get(e) or Health()
        domains: list[dict[str, Any]] = []
        for k, r in health.items():
            eg, _, dom = k.partition("|")
            if eg == e and dom and (bans[k] or r.state(now) != HEALTHY):
                domains.append({"domain": dom, "blocks": bans[k], "state": r.state(now), "until": r.until or None})
        domains.sort(key=lambda d: (-d["blocks"], d["domain"]))
        rows.append(
            {
                "egress": e,
                "group": (pool.get(e) or {}).get("group"),
                "in_pool": e in pool if pool else True,
                "state": rec.state(now),
                "score": rec.shown_score(now),
                "requests": requests[e],
                # the egress's own failures; other_outcomes: the rest (the site's, the parser's)
                "failures": {c: n for c, n in failures.get(e, {}).items() if _blamed_on_egress(c)},
                "other_outcomes": {c: n for c, n in failures.get(e, {}).items() if not _blamed_on_egress(c)},
                "until": rec.until or None,
                "level": rec.level,
                "banned_for": domains[:top],
                "routes_at_cap": [
                    {"domain": d, "capped": n, "sent": sent[e][d]}
                    for d, n in routes.get(e, Counter()).most_common(top)
                    if n
                ],
            }
        )
    return rows


def _add_counts(counts: Any, requests: Counter[str], failures: Any, bans: Counter[str], routes: Any, sent: Any) -> None:
    """One worker's counts added in (all of them or, when one does not decode, none)."""
    mine: tuple[Counter[str], dict[str, Counter[str]], Counter[str]] = (Counter(), {}, Counter())
    new_routes: list[tuple[str, str, int, int]] = []
    for r in counts.get("routes", []):
        new_routes.append((str(r["egress"]), str(r["domain"]), int(r.get("capped", 0)), int(r.get("sent", 0))))
    for e, n in counts.get("requests", {}).items():
        mine[0][str(e)] += int(n)
    for e, c in counts.get("failures", {}).items():
        for cls, n in c.items():
            mine[1].setdefault(str(e), Counter())[str(cls)] += int(n)
    for k, n in counts.get("bans", {}).items():
        mine[2][str(k)] += int(n)
    requests.update(mine[0])
    for e, c in mine[1].items():
        failures.setdefault(e, Counter()).update(c)
    bans.update(mine[2])
    for e, d, capped, n in new_routes:
        routes.setdefault(e, Counter())[d] += capped
        sent.setdefault(e, Counter())[d] += n


def format_rows(rows: list[dict[str, Any]], now: float | None = None) -> str:
    now = time.time() if now is None else now
    if not rows:
        return "no egress state recorded for this job"
    sizes = Counter(r["state"] for r in rows if r["in_pool"])
    out = ["egresses: " + ", ".join(f"{n} {s}" for s, n in sorted(sizes.items()))]
    for r in rows:
        fails = ", ".join(f"{c} {n}" for c, n in sorted(r["failures"].items())) or "no failures"
        others = r.get("other_outcomes") or {}
        if others:
            fails += "; not its fault: " + ", ".join(f"{c} {n}" for c, n in sorted(others.items()))
        until = f", until {when(r['until'], now)}" if r["until"] and r["state"] != HEALTHY else ""
        group = f" [{r['group']}]" if r["group"] else ""
        gone = " (no longer in the pool)" if not r["in_pool"] else ""
        if r["score"] is None:
            score = "score -"
        elif r["state"] != HEALTHY:
            score = f"score {r['score']:.2f} when quarantined"
        else:
            score = f"score {r['score']:.2f}"
        out.append(f"  {r['egress']}{group}{gone}: {r['state']}{until}, {score}, {r['requests']} request(s), {fails}")
        for d in r["banned_for"]:
            left = f" until {when(d['until'], now)}" if d["until"] and d["state"] != HEALTHY else ""
            out.append(f"      {d['domain']}: {d['state']}{left}, {d['blocks']} block(s)")
        for rt in r["routes_at_cap"]:
            out.append(
                f"      route to {rt['domain']}: {rt['sent']} sent; {rt['capped']} time(s) a request found "
                "it at its cap (SCALE_EGRESS_ROUTE_RATE, or the pace the site set for it) and took "
                "another egress or waited: more egresses would help"
            )
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


def read_job(settings: Any, job: str, problems: list[str] | None = None) -> list[dict[str, Any]] | None:
    """The rows of ``job``'s stored pool state, or None when no crawl has stored any.
    What had to be skipped is named in ``problems``."""
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
    return describe(state, problems=problems, longest=store.longest)


def describe_pool(pool: Any, worker: str, now: float, top: int = 10) -> list[dict[str, Any]]:
    """:func:`describe` of a live pool (this worker's own view), for the watch snapshots."""
    return describe(
        {
            "health": {k: h.to_record() for k, h in pool.health.items()},
            "counts": {worker: pool.counters()},
            "pool": {e: {"group": g} for e, g in pool.members.items()},
        },
        now,
        top,
        longest=pool.policy.max_quarantine,
    )
