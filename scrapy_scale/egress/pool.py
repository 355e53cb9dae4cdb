"""The egress pool's decisions: which egress a request goes through, and what an outcome
says about the egress it went through.

Plain Python with an injectable clock and randomness (no reactor): the Scrapy glue
(:mod:`scrapy_scale.egress.middleware`) feeds it outcomes and asks it for egresses.

- Health per egress (globally) and per (egress, domain), in :class:`~.health.Health`,
  kept and shared with the other workers by :class:`~.health_book.HealthBook`.
- :meth:`EgressPool.observe` turns an outcome's blame into evidence: ``egress`` hurts
  the egress everywhere, ``egress_domain`` (a block) hurts it for that domain only; a
  response that blames nobody or the domain (``rate_limited``: the site wants us slower,
  not another IP) is good for the egress; a ``transient`` outcome (no response, or a 5xx
  that is not a 503 saying the site is overloaded) counts against the egress when the
  same site answers through another egress far more often (:mod:`~.suspects`); ``egress_site`` (a proxy's own error
  answer) hurts the egress for that domain, and everywhere once it did so on several
  domains (:mod:`~.suspects` counts the domains); everything else is no evidence at all.
- :meth:`EgressPool.choose` picks among the egresses available for a domain, weighted by
  score and spread by load, with optional stickiness and route caps; a retry's egresses
  to avoid are avoided while another healthy one is, or will be once its route is free.
  When none is, the answer says until when the domain must wait.
- A group whose members degrade together is retired as a whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from scrapy_scale.clock import Clock, Randomness
from scrapy_scale.egress.body_times import BodyTimes
from scrapy_scale.egress.health import HEALTHY, PROBING, HealthPolicy, HealthRecord
from scrapy_scale.egress.health_book import Event, HealthBook, key_of
from scrapy_scale.egress.identity import Egress
from scrapy_scale.egress.routes import RouteLimiter
from scrapy_scale.egress.sticky import Stickiness, Sticky
from scrapy_scale.egress.suspects import Blame, Suspects

#: how long a domain waits when its only available egresses are probing with no free slot
PROBE_WAIT = 1.0
#: how long a domain waits when the pool has no egress at all (a source that is empty)
EMPTY_WAIT = 5.0


@dataclass(frozen=True)
class Choice:
    """An egress for a request, or (``egress`` None) the time its domain must wait until."""

    egress: Egress | None
    wait_until: float = 0.0
    #: why the domain waits: ``quarantined``, ``route_cap``, ``probing``, ``empty``
    reason: str = ""
    #: a re-probe of an egress out of quarantine
    probe: bool = False
    #: the egress has not proved itself: a re-probe, or no answer through it yet while
    #: others answered (a failure without an answer is then retried as the egress's)
    unproven: bool = False


@dataclass
class PoolOptions:
    sticky_uses: int = 0
    sticky_age: float = 60.0
    route_rate: float = 0.0
    group_retire: float = 0.5


class EgressPool:
    def __init__(
        self,
        egresses: Iterable[Egress],
        policy: HealthPolicy | None = None,
        options: PoolOptions | None = None,
        clock: Clock | None = None,
        rng: Randomness | None = None,
    ):
        from scrapy_scale.clock import wall

        self.policy = policy or HealthPolicy()
        self.options = options or PoolOptions()
        self.clock = clock or wall
        self.rng = rng or Randomness()
        self.routes = RouteLimiter(self.options.route_rate)
        self.egresses: dict[str, Egress] = {}
        #: health per egress and per (egress, domain), and what changed since the last sync
        self.book = HealthBook(self.policy, self.clock)
        self.health = self.book.health
        self.dirty = self.book.dirty
        self.inflight: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.failures: dict[str, Counter[str]] = {}
        self.bans: Counter[str] = Counter()  # key_of(egress, domain) -> blocks
        self.retired: dict[str, float] = {}  # group -> when
        self.counts: Counter[str] = Counter()  # evictions, reprobes, restored, ...
        #: each domain's sticky egress (PoolOptions.sticky_uses)
        self.stickiness = Stickiness(self.options)
        self.suspects = Suspects(self.policy.half_life)
        self.bodies = BodyTimes()  # the first-byte wrapper measures, on_outcome tells observe()
        #: egresses an answer (any status) came through, in this process
        self.answered: set[str] = set()
        self.set_egresses(egresses)

    # ---- the set of egresses ---------------------------------------------------

    def set_egresses(self, egresses: Iterable[Egress]) -> tuple[list[str], list[str]]:
        """Replace the set (a source changed); health of the egresses kept is kept.
        Returns (added ids, removed ids)."""
        new = {e.id: e for e in egresses}
        added = [i for i in new if i not in self.egresses]
        removed = [i for i in self.egresses if i not in new]
        self.egresses = new
        self.stickiness.forget(new)
        self.suspects.forget(removed)
        self.bodies.forget(removed)
        return added, removed

    def sticky(self, domain: str) -> Sticky | None:
        """The egress ``domain`` sticks to now (with its uses and since when), None if none."""
        return self.stickiness.by_domain.get(domain)

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in self.egresses.values():
            if e.group is not None:
                out.setdefault(e.group, []).append(e.id)
        return out

    def state(self, egress: str, domain: str = "") -> str:
        return self.book.state(egress, domain)

    def score(self, egress: str, domain: str = "") -> float:
        return self.book.score(egress, domain)

    # ---- selection -------------------------------------------------------------

    def _health_wait(self, e: str, domain: str, now: float) -> float:
        """0 when the health of ``e`` (and of ``e`` for ``domain``) lets it carry a request now."""
        waits = []
        for h in (self.book.peek(e), self.book.peek(e, domain)):
            if h is not None and not h.probe_allowed(now, self.policy):
                waits.append(h.until if now < h.until else now + PROBE_WAIT)
        return max(waits) if waits else 0.0

    def _blocked_until(self, e: str, domain: str, now: float, refused_via: str | None = None) -> float:
        """0 when ``e`` can carry a request to ``domain`` now, else when it may next."""
        wait = self._health_wait(e, domain, now)
        if not wait and self.routes.full(e, domain, now, refused_via):
            return self.routes.free_at(e, domain, refused_via)
        return wait

    def usable(self, domain: str) -> Iterator[str]:
        """The egresses whose health lets them carry a request to ``domain`` now, their
        route capacity aside (the throttle asks which routes to wait for, and stops at the
        first that is due: lazily, a pool may be large)."""
        now = self.clock()
        return (e for e in list(self.egresses) if not self._health_wait(e, domain, now))

    def choose(
        self,
        domain: str,
        avoid: Iterable[str] = (),
        *,
        retry: bool = False,
        one_slot: bool = False,
        refused_via: str | None = None,
    ) -> Choice:
        """An egress for a request to ``domain`` not through ``avoid``. A re-probe out of
        quarantine takes the first request that comes, but not a ``retry`` while another
        egress is free (a page's late retry went through two bad proxies' re-probes), nor a
        request to a ``one_slot`` site (a Crawl-delay), which also goes through an egress
        that has answered while one is free (a blackhole's re-probe held such a site's only
        slot 7.9 s). ``refused_via``: the request retries a page the site refused through
        that egress (429, 503); the route gate holds siblings at the refused pace."""
        now = self.clock()
        if not self.egresses:
            return Choice(None, now + EMPTY_WAIT, "empty")
        blocked = {e: self._blocked_until(e, domain, now, refused_via) for e in self.egresses}
        free = [e for e, t in blocked.items() if not t]
        if not free:
            return self._wait(domain, blocked, now)
        avoid = set(avoid)
        pick = [e for e in free if e not in avoid]
        if not pick:
            # only egresses this request failed through are free: wait for a healthy one it
            # does not avoid, at its route's pace or holding its first request (free once
            # that answers: asked again within PROBE_WAIT), rather than go back through one
            # that failed it (a browser page went three times through the same dead proxy
            # while the healthy one held its first page load)
            others = [t for e, t in blocked.items() if e not in avoid and not self._health_wait(e, domain, now)]
            if others:
                self.counts["wait/avoided"] += 1
                return Choice(None, min(min(others), now + PROBE_WAIT), "avoided")
            pick = free
        probing = [e for e in pick if self.state(e) == PROBING or self.state(e, domain) == PROBING]
        if probing and (retry or one_slot) and len(probing) < len(pick):
            self.counts["reprobe/spared_one_slot" if one_slot else "reprobe/spared_retry"] += 1
            pick, probing = [e for e in pick if e not in probing], []
        if one_slot and not probing:
            proven = [e for e in pick if e in self.answered]
            if proven and len(proven) < len(pick):
                self.counts["unproven/spared_one_slot"] += 1
                pick = proven
        chosen = probing[0] if probing else self.stickiness.kept(domain, pick, avoid, now)
        if chosen is None:
            chosen = self._weighted(domain, pick, now)
            self.stickiness.chose(domain, chosen, now)
        if refused_via is not None:
            self.counts["refused_retries"] += 1
        return self._take(chosen, domain, now)

    def _weighted(self, domain: str, pick: list[str], now: float) -> str:
        weights = [self.score(e) * self.score(e, domain) / (1.0 + self.inflight[e]) for e in pick]
        return weighted_pick(self.rng.uniform(0, sum(weights)), pick, weights)

    def _take(self, e: str, domain: str, now: float) -> Choice:
        probe = False
        for h in (self.book.peek(e), self.book.peek(e, domain)):
            if h is not None and h.sent(now):
                probe = True
        if probe:
            self.counts["reprobes"] += 1
        self.routes.take(e, domain, now)
        self.inflight[e] += 1
        self.requests[e] += 1
        # no answer through it yet while others answered: not while no egress answered at all
        # (a site that never answers must not look like every egress's fault)
        unproven = probe or (bool(self.answered) and e not in self.answered)
        return Choice(self.egresses[e], probe=probe, unproven=unproven)

    def _wait(self, domain: str, blocked: dict[str, float], now: float) -> Choice:
        reason = wait_reason([(self.state(e), self.state(e, domain)) for e in blocked])
        self.counts[f"wait/{reason}"] += 1
        return Choice(None, min(blocked.values()), reason)

    def release(self, egress: str) -> None:
        """A request sent through ``egress`` has its outcome (in-flight count down)."""
        if self.inflight[egress] > 0:
            self.inflight[egress] -= 1

    # ---- evidence --------------------------------------------------------------

    def observe(
        self,
        egress: str,
        domain: str,
        cls: str,
        blame: str,
        responded: bool,
        slow_down: bool = False,
        slow: Any = None,
    ) -> list[Event]:
        """One attempt's outcome through ``egress``. ``responded``: a response came back
        (any status); ``slow_down``: a 503 saying the site is overloaded (its pressure on
        the route, never the egress's failure); ``slow``: its body was far slower than the
        site's through other egresses (``body_times.py``). Returns the state changes it caused."""
        if egress not in self.egresses:
            return []
        now = self.clock()
        if responded:
            self.answered.add(egress)
        if cls != "ok":
            self.failures.setdefault(egress, Counter())[cls] += 1
        if blame == "egress_domain":
            self.bans[key_of(egress, domain)] += 1
        events: list[Event] = []
        if blame == "egress_site":  # the proxy answered for itself
            return self._blame([self.suspects.convict(egress, domain, now)], now, witnessed=False)
        if slow is not None and responded:  # a failure of the route, of the egress once on several sites
            self.counts["slow_bodies"] += 1
            keys = ("", domain) if self.bodies.spread(egress, domain, now, self.policy.half_life) else (domain,)
            return [ev for d in keys for ev in self._record(egress, d, False, now)]
        answered = responded and not (cls == "transient" and not slow_down)
        if blame == "egress":
            events += self._record(egress, "", False, now)
        elif answered:
            events += self._record(egress, "", True, now)
        if blame == "egress_domain":
            events += self._record(egress, domain, False, now)
        elif answered and blame == "none":
            events += self._record(egress, domain, True, now)
        if answered and blame in ("none", "domain"):
            events += self._blame(self.suspects.answered(egress, domain, now), now)
        elif cls == "transient":
            # a timeout, an answer that is not HTTP, a connection closed mid-answer, a 5xx: the
            # egress's fault only when the same site answers through another egress far more
            # often than through this one (a site-wide 5xx, or one on every route, blames none)
            self.counts["suspect_failures"] += 1
            events += self._blame(self.suspects.failed(egress, domain, now), now)
        return events

    def _blame(self, blames: list[Blame], now: float, witnessed: bool = True) -> list[Event]:
        events: list[Event] = []
        for b in blames:
            if b.egress not in self.egresses:
                continue
            if witnessed:
                self.counts["suspect_blamed"] += 1
            events += self._record(b.egress, b.domain, False, now)
            for _ in range(b.n_global):
                events += self._record(b.egress, "", False, now)
        return events

    def _record(self, egress: str, domain: str, good: bool, now: float) -> list[Event]:
        if good and domain and key_of(egress, domain) not in self.health:
            return []  # a good answer for a domain with no history: nothing to remember
        h = self.book.of(egress, domain)
        change = h.record(good, now, self.policy, self.rng)
        self.dirty.add(key_of(egress, domain))
        if change is None:
            return []
        self.counts[change] += 1
        if change != "restored":
            self.counts["evictions/domain" if domain else "evictions"] += 1
        events = [Event(change, egress, domain, h.until)]
        group = self.egresses[egress].group
        if not domain and group is not None:
            if change == "restored":
                self.retired.pop(group, None)
            else:
                events += self._maybe_retire(group, now)
        return events

    def _maybe_retire(self, group: str, now: float) -> list[Event]:
        members = self.groups().get(group, [])
        if len(members) < 2 or group in self.retired:
            return []
        down = [m for m in members if self.state(m) != HEALTHY]
        if len(down) < 2 or len(down) == len(members) or len(down) / len(members) < self.options.group_retire:
            return []  # one member failing alone is that member's problem; all down: nothing to retire
        self.retired[group] = now
        self.counts["groups_retired"] += 1
        last = 0.0
        for m in members:
            h = self.book.of(m)
            if h.state(now) == HEALTHY:
                h.quarantine(now, self.policy, self.rng)
                self.dirty.add(m)
            last = max(last, h.until)
        return [Event("group_retired", group, "", last, f"{len(down)} of {len(members)} members failed")]

    # ---- shared state ----------------------------------------------------------

    def take_dirty(self) -> dict[str, HealthRecord]:
        return self.book.take_dirty()

    def merge(self, records: dict[str, dict[str, Any]]) -> list[Event]:
        """Take the state changes other workers made (newer ``changed`` wins)."""
        return self.book.merge(records, self.egresses)

    def counters(self) -> dict[str, Any]:
        """This worker's cumulative counts (for the shared store and status)."""
        return {
            "requests": dict(self.requests),
            "failures": {e: dict(c) for e, c in self.failures.items()},
            "bans": dict(self.bans),
            "routes": self.routes.pressure(50),
        }

    def load_counters(self, data: dict[str, Any]) -> None:
        self.requests.update(data.get("requests", {}))
        for e, c in data.get("failures", {}).items():
            self.failures.setdefault(e, Counter()).update(c)
        self.bans.update(data.get("bans", {}))

    def pool_sizes(self) -> Counter[str]:
        return Counter(self.state(e) for e in self.egresses)

    @property
    def members(self) -> dict[str, str | None]:
        return {e.id: e.group for e in self.egresses.values()}


def weighted_pick(x: float, pick: list[str], weights: list[float]) -> str:
    """The egress of ``pick`` where ``x`` (drawn from 0 to the weights' sum) falls."""
    for e, w in zip(pick, weights, strict=True):
        x -= w
        if x <= 0:
            return e
    return pick[-1]


def wait_reason(states: list[tuple[str, str]]) -> str:
    """Why no egress is free, from each one's (global, site) state."""
    if all(PROBING not in s and s != (HEALTHY, HEALTHY) for s in states):
        return "quarantined"
    if any(s == (HEALTHY, HEALTHY) for s in states):
        return "route_cap"
    return "probing"
