"""The consistency checks of a run against its expectations and its earlier runs
(plain Python: figures in, verdicts out).

Every check has a ``name`` (``missing_rate:price``), a value, what it was compared with
(a declared expectation, an absolute threshold, or the *baseline*: the mean over the
earlier clean runs of the job, or over all earlier runs when none was clean), and
``ok``: True, False (the check fails the run) or None (nothing to compare with yet:
shown, never failing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from scrapy_scale.quality.figures import RunFigures

#: failure classes whose share may rise without failing the run (more successes)
DONE = frozenset({"ok", "not_found"})


@dataclass(frozen=True)
class Thresholds:
    expect: dict[str, float] = field(default_factory=dict)
    ratio_tolerance: float = 0.05
    max_rise: float = 0.05
    max_invalid_rate: float = 0.05
    max_duplicate_rate: float = 0.01
    #: with no earlier run to compare with (a first run, a new callback): the absolute
    #: limits of a callback's empty-parse share and of the parse_failed share
    max_empty_rate: float = 0.1
    max_parse_failed_rate: float = 0.05


@dataclass
class StoreScan:
    """What the end-of-run scan of the store found (rows of the job)."""

    rows: int = 0
    #: rows sharing SCALE_QUALITY_DUPLICATE_KEY fields with an earlier row (None: not checked)
    duplicates_by_key: int | None = None
    #: rows sharing SCALE_QUALITY_CONTENT_FIELDS' hash with an earlier row (None: not checked)
    duplicates_by_content: int | None = None


@dataclass
class Check:
    name: str
    ok: bool | None
    value: float | int | None
    compared_with: float | int | None = None
    how: str = ""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pct(x: float | None) -> str:
    """A share as the text and the HTML report show it: rounded once, from the value the
    check keeps (a value kept rounded and shown rounded again read 31.8% beside 31.7%)."""
    return "-" if x is None else f"{100 * float(x):.1f}%"


def evaluate(cur: RunFigures, baseline: list[RunFigures], t: Thresholds, scan: StoreScan | None = None) -> list[Check]:
    """Every check of ``cur``; ``baseline``: the earlier runs to compare with (clean ones)."""
    out: list[Check] = []
    out += _ratios(cur, baseline, t)
    out += _empty(cur, baseline, t)
    out += _missing(cur, baseline, t)
    out += _invalid(cur, t)
    out += _duplicates(cur, t, scan)
    out += _classes(cur, baseline, t)
    return out


def _ratios(cur: RunFigures, base: list[RunFigures], t: Thresholds) -> list[Check]:
    out = []
    for cb in sorted(set(cur.completed) | set(t.expect)):
        n, stored = cur.completed.get(cb, 0), cur.stored.get(cb, 0)
        name = f"items_per_request:{cb}"
        if not n:
            if cb in t.expect:
                out.append(Check(name, None, None, t.expect[cb], "declared", f"{cb}: no completed request"))
            continue
        ratio = stored / n
        want: float | None
        if cb in t.expect:
            want, how = t.expect[cb], "declared"
        else:
            ratios = [b.stored.get(cb, 0) / b.completed[cb] for b in base if b.completed.get(cb)]
            want, how = _mean(ratios), "earlier runs"
        if want is None:
            out.append(
                Check(
                    name,
                    None,
                    ratio,
                    None,
                    "no earlier run",
                    f"{cb}: {stored} items stored for {n} completed requests ({ratio:.2f} per request)",
                )
            )
            continue
        ok = abs(ratio - want) <= want * t.ratio_tolerance if want else stored == 0
        out.append(
            Check(
                name,
                ok,
                ratio,
                want,
                how,
                f"{cb}: {stored} items stored for {n} completed requests ({ratio:.2f} per request, {how} {want:.2f})",
            )
        )
    return out


def _rise_check(
    name: str, what: str, value: float, earlier: list[float], t: Thresholds, detail: str, limit: float | None = None
) -> Check:
    """``value`` against the mean of ``earlier``; with no earlier value, against ``limit``
    (an absolute threshold) when there is one, else shown only (``ok`` None)."""
    base = _mean(earlier)
    if base is None and limit is not None:
        ok = value <= limit
        return Check(
            name,
            ok,
            value,
            limit,
            "threshold (no earlier run)",
            f"{what}: {pct(value)} ({detail}); no earlier run, "
            + (f"within the limit of {pct(limit)}" if ok else f"more than the limit of {pct(limit)}"),
        )
    if base is None:
        return Check(name, None, value, None, "no earlier run", f"{what}: {pct(value)} ({detail})")
    ok = value - base <= t.max_rise
    verb = "rose" if value > base else "is"
    return Check(
        name,
        ok,
        value,
        base,
        "earlier runs",
        f"{what}: {pct(value)} ({detail}); {verb} against {pct(base)} in earlier runs"
        + ("" if ok else f", more than the allowed {pct(t.max_rise)} rise"),
    )


def _shares(
    prefix: str,
    what: str,
    num: Counter[str],
    den: Counter[str],
    base: list[RunFigures],
    attr: tuple[str, str],
    unit: str,
    t: Thresholds,
    limits: dict[str, float] | None = None,
) -> list[Check]:
    """One rise check per key of ``den``: the share ``num[k] / den[k]`` against the baseline's
    (against ``limits[k]``, when given, for a key no earlier run has)."""
    out = []
    for k, n in sorted(den.items()):
        if not n:
            continue
        share = num.get(k, 0) / n
        earlier = [getattr(b, attr[0]).get(k, 0) / getattr(b, attr[1])[k] for b in base if getattr(b, attr[1]).get(k)]
        limit = (limits or {}).get(k)
        out.append(
            _rise_check(f"{prefix}:{k}", what.format(k), share, earlier, t, f"{num.get(k, 0)} of {n}{unit}", limit)
        )
    return out


def _empty(cur: RunFigures, base: list[RunFigures], t: Thresholds) -> list[Check]:
    """Per callback, the share of empty parses against earlier runs; in a first run, against
    the absolute limit for callbacks known to yield items (they stored some, or are declared),
    leaving out the empty parses that yielded requests: listing pages (a callback that never
    yields items is all of them; a CrawlSpider's rules share one callback for both)."""
    yielding = {cb for cb, n in cur.stored.items() if n} | {cb for cb, n in t.expect.items() if n}
    out = []
    for cb, n in sorted(cur.completed.items()):
        if not n:
            continue
        empty = cur.empty.get(cb, 0)
        earlier = [b.empty.get(cb, 0) / b.completed[cb] for b in base if b.completed.get(cb)]
        name, what = f"empty_parses:{cb}", f"{cb} empty parses"
        listings = cur.listings.get(cb, 0)
        if earlier or cb not in yielding or not listings:
            limit = t.max_empty_rate if cb in yielding else None
            out.append(_rise_check(name, what, empty / n, earlier, t, f"{empty} of {n}", limit))
        elif n > listings:
            share, detail = (empty - listings) / (n - listings), f"{empty - listings} of {n - listings}"
            detail += f", {listings} listing pages left out"
            out.append(_rise_check(name, what, share, earlier, t, detail, t.max_empty_rate))
        else:  # listings only
            out.append(_rise_check(name, what, empty / n, earlier, t, f"{empty} of {n}, all listing pages"))
    return out


def _missing(cur: RunFigures, base: list[RunFigures], t: Thresholds) -> list[Check]:
    return _shares(
        "missing_rate", "field {} missing", cur.missing, cur.checked, base, ("missing", "checked"), " items", t
    )


def _invalid(cur: RunFigures, t: Thresholds) -> list[Check]:
    if not cur.validated:
        return []
    rate = cur.quarantined / cur.validated
    ok = rate <= t.max_invalid_rate
    reasons = ", ".join(f"{k} {v}" for k, v in cur.invalid.most_common(5))
    return [
        Check(
            "quarantined",
            ok,
            rate,
            t.max_invalid_rate,
            "threshold",
            f"{cur.quarantined} of {cur.validated} items quarantined ({pct(rate)})"
            + (f": {reasons}" if reasons else ""),
        )
    ]


def _duplicates(cur: RunFigures, t: Thresholds, scan: StoreScan | None) -> list[Check]:
    items = max(sum(cur.stored.values()), cur.validated)
    out = []

    def dup(name: str, n: int, of: int, what: str) -> None:
        rate = n / of if of else 0.0
        out.append(
            Check(
                name,
                rate <= t.max_duplicate_rate,
                n,
                t.max_duplicate_rate,
                "threshold (share)",
                f"{n} {what} of {of} ({pct(rate)})",
            )
        )

    dup("duplicates_in_run:key", cur.duplicates_by_key, items, "items with a key already written in this run")
    if cur.content_fields:
        dup(
            "duplicates_in_run:content",
            cur.duplicates_by_content,
            items,
            f"items with the {'+'.join(cur.content_fields)} of an earlier item of this run",
        )
    if scan is not None:
        if scan.duplicates_by_key is not None:
            dup(
                "duplicates_in_store:key",
                scan.duplicates_by_key,
                scan.rows,
                "rows sharing the duplicate key with another row",
            )
        if scan.duplicates_by_content is not None:
            dup(
                "duplicates_in_store:content",
                scan.duplicates_by_content,
                scan.rows,
                "rows sharing content with another row",
            )
    return out


def _classes(cur: RunFigures, base: list[RunFigures], t: Thresholds) -> list[Check]:
    shares = cur.class_shares()
    out = []
    for cls in sorted(set(shares) | {c for b in base for c in b.classes}):
        if cls in DONE:
            continue
        value = shares.get(cls, 0.0)
        earlier = [b.class_shares().get(cls, 0.0) for b in base if b.final]
        out.append(
            _rise_check(
                f"class_share:{cls}",
                f"{cls} outcomes",
                value,
                earlier,
                t,
                f"{cur.classes.get(cls, 0)} of {cur.final} requests",
                t.max_parse_failed_rate if cls == "parse_failed" else None,
            )
        )
    return out


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.ok is False]
