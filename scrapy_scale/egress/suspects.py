"""Blame for failures after the connection: a timeout, an answer that is not HTTP, a
connection closed mid-answer, a 5xx answer through an egress.

Such a failure (a ``transient`` outcome: no response, or a 5xx that is not a 503 saying
the site is overloaded) may be the egress's fault
(a proxy that accepts and never answers) or the site's (a site that hangs or resets).
It counts against the egress only with evidence: the same site answered through
another egress within ``window`` seconds after the failure (an answer from before may be
of a page sent before the failing one: a listing, then detail pages that all hang), and that egress
answers the site more often than it fails on it and fails it at most half as often as the
failing egress does (decayed counts, half-life ``window``): pages that hang on every
egress (the same share of failures on each) blame none. Then it counts
against (egress, site), and against the egress everywhere once it has been blamed so
on ``sites`` different sites within the window (the earlier blamed failures then count
globally too). A site that fails on every egress blames none of them.

A failure that is the egress's for certain (its proxy answered for itself,
:meth:`Suspects.convict`) needs no witness, and counts globally by the same rule.

Plain Python, the time is passed in: :class:`~scrapy_scale.egress.pool.EgressPool`
feeds it and turns its answers into health evidence.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

#: distinct sites an egress must have been blamed on before its failures count globally
GLOBAL_SITES = 2
#: sites remembered (least recently seen dropped first), failures without evidence kept per site
MAX_SITES = 20_000
MAX_PENDING = 64
#: blamed failures remembered per egress (the newest)
MAX_BLAMED = 256
#: a witness fails the site at most 1/WITNESS_FACTOR as often as the blamed route
WITNESS_FACTOR = 2.0


@dataclass(frozen=True)
class Blame:
    """Count ``n_global`` failures against ``egress`` everywhere and, when ``domain`` is
    set, one against (``egress``, ``domain``)."""

    egress: str
    domain: str
    n_global: int = 0


@dataclass
class _Ev:
    at: float
    domain: str
    counted: bool = False


@dataclass
class _Route:
    """One egress's recent record on one site: decayed answers and failures after the
    connection (half-life: the window), and the last answer's time."""

    good: float = 0.0
    bad: float = 0.0
    at: float = 0.0
    last_good: float = -math.inf

    def decay(self, now: float, window: float) -> None:
        if self.at and now > self.at:
            f = 0.5 ** ((now - self.at) / window)
            self.good *= f
            self.bad *= f
        self.at = now

    def works(self, now: float, window: float) -> bool:
        """It answered within the window, and more often than it failed."""
        self.decay(now, window)
        return now - self.last_good <= window and self.good > self.bad

    def ratio(self) -> float:
        """Its share of failures (decayed); 0 with no record."""
        total = self.good + self.bad
        return self.bad / total if total > 0 else 0.0

    def witness(self, failing: _Route, now: float, window: float) -> bool:
        """It works, and ``failing`` fails the site more often than it answers it and at
        least twice as often as this one does: pages that hang on every route (about the
        same share of failures everywhere) blame none."""
        bad = failing.ratio()
        return bad > 0.5 and self.works(now, window) and self.ratio() * WITNESS_FACTOR <= bad


class Suspects:
    def __init__(self, window: float = 60.0, sites: int = GLOBAL_SITES):
        self.window = window
        self.sites = sites
        self.routes: OrderedDict[str, dict[str, _Route]] = OrderedDict()  # domain -> egress -> its record
        self.pending: dict[str, list[tuple[str, float]]] = {}  # domain -> failures not blamed yet
        self.blamed: dict[str, list[_Ev]] = {}  # egress -> its blamed failures in the window

    def _route(self, egress: str, domain: str, now: float) -> _Route:
        seen = self.routes.get(domain)
        if seen is None:
            seen = self.routes[domain] = {}
            if len(self.routes) > MAX_SITES:
                gone, _ = self.routes.popitem(last=False)
                self.pending.pop(gone, None)
        else:
            self.routes.move_to_end(domain)
        r = seen.get(egress)
        if r is None:
            r = seen[egress] = _Route(at=now)
        r.decay(now, self.window)
        return r

    def answered(self, egress: str, domain: str, now: float) -> list[Blame]:
        """``domain`` answered through ``egress``: evidence against the other egresses that
        failed on it recently, when this route works (it answers more than it fails: a
        site whose pages hang on every egress is no evidence against any of them)."""
        r = self._route(egress, domain, now)
        r.good += 1.0
        r.last_good = now
        waiting = self.pending.get(domain)
        if not waiting or not r.works(now, self.window):
            return []
        out, keep = [], []
        seen = self.routes[domain]
        for e, t in waiting:
            if now - t > self.window:
                continue
            failing = seen.get(e)
            if e != egress and failing is not None:
                failing.decay(now, self.window)
                if r.witness(failing, now, self.window):
                    out.append(self._blame(e, domain, now))
                    continue
            keep.append((e, t))
        if keep:
            self.pending[domain] = keep
        else:
            del self.pending[domain]
        return out

    def failed(self, egress: str, domain: str, now: float) -> list[Blame]:
        """An attempt to ``domain`` through ``egress`` failed after the connection: it
        waits for the site's next answer through another egress (:meth:`answered`)."""
        self._route(egress, domain, now).bad += 1.0
        # blamed only when the site answers through another egress afterwards: an answer
        # from before may be of a page sent before this attempt's (pages that all hang
        # after a listing that answered)
        waiting = self.pending.setdefault(domain, [])
        waiting.append((egress, now))
        del waiting[:-MAX_PENDING]
        return []

    def convict(self, egress: str, domain: str, now: float) -> Blame:
        """``egress`` failed at ``domain`` for certain (its proxy answered for itself): it
        counts against (egress, site) now, and globally as the blamed failures above do."""
        self._route(egress, domain, now).bad += 1.0
        return self._blame(egress, domain, now)

    def forget(self, egresses: list[str]) -> None:
        """Drop the records of egresses no longer in the pool (a source changed): a
        source that rotates its egresses would otherwise grow every site's record."""
        gone = set(egresses)
        if not gone:
            return
        for seen in self.routes.values():
            for e in gone & seen.keys():
                del seen[e]
        for domain, waiting in list(self.pending.items()):
            waiting[:] = [(e, t) for e, t in waiting if e not in gone]
            if not waiting:
                del self.pending[domain]
        for e in gone:
            self.blamed.pop(e, None)

    def _blame(self, egress: str, domain: str, now: float) -> Blame:
        events = [ev for ev in self.blamed.get(egress, ()) if now - ev.at <= self.window]
        events.append(_Ev(now, domain))
        del events[:-MAX_BLAMED]
        self.blamed[egress] = events
        if len({ev.domain for ev in events}) < self.sites:
            return Blame(egress, domain)
        n = 0
        for ev in events:
            if not ev.counted:
                ev.counted = True
                n += 1
        return Blame(egress, domain, n)
