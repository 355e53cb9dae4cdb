"""What the quality layer counts during a run (plain Python, JSON-able, mergeable).

One :class:`RunFigures` per crawl process; the history keeps each process's figures, and
the report sums the parts of a run (every worker of a distributed run, a resumed run's
processes) with :func:`merge`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.shared_values import whole

#: done and parse_failed outcomes: the callback ran (a "completed" request of the report)
COMPLETED_CLASSES = frozenset({"ok", "parse_failed"})
#: the largest count read back from the history
MAX_COUNT = 10**15


@dataclass
class RunFigures:
    job: str = ""
    run_id: str = ""
    #: callback name -> completed requests (final ok / parse_failed outcomes: the callback ran)
    completed: Counter[str] = field(default_factory=Counter)
    #: callback name -> completed requests whose callback yielded no item (and did not raise)
    empty: Counter[str] = field(default_factory=Counter)
    #: callback name -> empty parses that yielded requests (listing pages: a CrawlSpider's
    #: rules share one callback for listings and item pages)
    listings: Counter[str] = field(default_factory=Counter)
    #: callback name -> items stored (``item_scraped``: through every pipeline, the store last)
    stored: Counter[str] = field(default_factory=Counter)
    #: failure class -> final outcomes of crawl requests
    classes: Counter[str] = field(default_factory=Counter)
    #: items checked by validation / quarantined / quarantined by reason kind
    validated: int = 0
    quarantined: int = 0
    invalid: Counter[str] = field(default_factory=Counter)
    #: critical field ("field", or "Type.field" for per-type fields) -> items checked / missing it
    checked: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)
    #: items whose key was already written in this run (the store's count) / same content hash
    duplicates_by_key: int = 0
    duplicates_by_content: int = 0
    #: the fields hashed for duplicates_by_content ([]: not counted)
    content_fields: list[str] = field(default_factory=list)
    #: raw snapshots written / dropped to stay within the bounds
    snapshots: int = 0
    snapshots_dropped: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            out[name] = dict(v) if isinstance(v, Counter) else list(v) if isinstance(v, list) else v
        return out

    @classmethod
    def from_json(cls, d: Any, bad: list[str] | None = None) -> RunFigures:
        """Figures read back (the history is shared state: another program may have written
        it): a field of another type than the figures', or a count that is no whole number,
        is left at its default and its name added to ``bad``."""
        out = cls()
        for k, v in d.items() if isinstance(d, dict) else ():
            cur = getattr(out, k, None)
            if k not in out.__dataclass_fields__:
                continue
            if isinstance(cur, Counter):
                got = {str(a): whole(b, 0, MAX_COUNT) for a, b in v.items()} if isinstance(v, dict) else None
                if got is None or None in got.values():
                    got = {a: n for a, n in (got or {}).items() if n is not None}
                    (bad if bad is not None else []).append(k)
                setattr(out, k, Counter(got))
            elif isinstance(cur, int):
                n = whole(v, 0, MAX_COUNT)
                if n is None:
                    (bad if bad is not None else []).append(k)
                else:
                    setattr(out, k, n)
            elif isinstance(cur, list) and isinstance(v, list) and all(isinstance(x, str) for x in v):
                setattr(out, k, list(v))
            elif isinstance(cur, str) and isinstance(v, str):
                setattr(out, k, v)
            else:
                (bad if bad is not None else []).append(k)
        return out

    @property
    def final(self) -> int:
        return sum(self.classes.values())

    def missing_rates(self) -> dict[str, float]:
        return {f: self.missing[f] / n for f, n in sorted(self.checked.items()) if n}

    def class_shares(self) -> dict[str, float]:
        total = self.final
        return {c: n / total for c, n in sorted(self.classes.items())} if total else {}


def merge(parts: list[RunFigures]) -> RunFigures:
    """The figures of a whole run from its parts (sums)."""
    out = RunFigures()
    for p in parts:
        out.job = out.job or p.job
        out.run_id = out.run_id or p.run_id
        out.content_fields = out.content_fields or list(p.content_fields)
        for name in out.__dataclass_fields__:
            a, b = getattr(out, name), getattr(p, name)
            if isinstance(a, Counter):
                a.update(b)
            elif isinstance(a, int) and not isinstance(a, bool):
                setattr(out, name, a + b)
    return out
