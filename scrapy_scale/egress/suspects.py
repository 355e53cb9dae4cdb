"""Blame for failures after the connection: a timeout, an answer that is not HTTP, a
connection closed mid-answer through an egress.

Such a failure (a ``transient`` outcome without a response) may be the egress's fault
(a proxy that accepts and never answers) or the site's (a site that hangs or resets).
It counts against the egress only with evidence: the same site answered through
another egress within ``window`` seconds (before or after the failure). Then it counts
against (egress, site), and against the egress everywhere once it has been blamed so
on ``sites`` different sites within the window (the earlier blamed failures then count
globally too). A site that fails on every egress blames none of them.

Plain Python, the time is passed in: :class:`~scrapy_scale.egress.pool.EgressPool`
feeds it and turns its answers into health evidence.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

#: distinct sites an egress must have been blamed on before its failures count globally
GLOBAL_SITES = 2
#: sites remembered (least recently seen dropped first), failures without evidence kept per site
MAX_SITES = 20_000
MAX_PENDING = 64
#: blamed failures remembered per egress (the newest)
MAX_BLAMED = 256


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


class Suspects:
    def __init__(self, window: float = 60.0, sites: int = GLOBAL_SITES):
        self.window = window
        self.sites = sites
        self.ok: OrderedDict[str, dict[str, float]] = OrderedDict()  # domain -> egress -> last answer
        self.pending: dict[str, list[tuple[str, float]]] = {}  # domain -> failures not blamed yet
        self.blamed: dict[str, list[_Ev]] = {}  # egress -> its blamed failures in the window

    def answered(self, egress: str, domain: str, now: float) -> list[Blame]:
        """``domain`` answered through ``egress``: evidence against the other egresses that
        failed on it recently."""
        seen = self.ok.get(domain)
        if seen is None:
            seen = self.ok[domain] = {}
            if len(self.ok) > MAX_SITES:
                gone, _ = self.ok.popitem(last=False)
                self.pending.pop(gone, None)
        else:
            self.ok.move_to_end(domain)
        seen[egress] = now
        waiting = self.pending.get(domain)
        if not waiting:
            return []
        out, keep = [], []
        for e, t in waiting:
            if now - t > self.window:
                continue
            if e == egress:
                keep.append((e, t))
            else:
                out.append(self._blame(e, domain, now))
        if keep:
            self.pending[domain] = keep
        else:
            del self.pending[domain]
        return out

    def failed(self, egress: str, domain: str, now: float) -> list[Blame]:
        """An attempt to ``domain`` through ``egress`` failed after the connection."""
        seen = self.ok.get(domain, {})
        if any(e != egress and now - t <= self.window for e, t in seen.items()):
            return [self._blame(egress, domain, now)]
        waiting = self.pending.setdefault(domain, [])
        waiting.append((egress, now))
        del waiting[:-MAX_PENDING]
        return []

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
