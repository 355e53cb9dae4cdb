"""The egress pool's health book: health per egress (globally) and per (egress, domain),
the keys changed since the last sync, and the changes other workers made merged in
(shared state is untrusted: a record that does not decode is skipped, a quarantine too
far ahead is shortened, each with an :class:`Event` for the glue to log).

Plain Python with an injectable clock.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from scrapy_scale.clock import Clock
from scrapy_scale.egress.health import HEALTHY, Health, HealthPolicy, HealthRecord, clamp_note, score_note


@dataclass(frozen=True)
class Event:
    """A state change for the glue to log and count."""

    #: quarantined, requarantined, restored, group_retired, adopted; from shared state that is
    #: untrusted: bad_record (``egress`` is the record's key; skipped), clamped (its end shortened),
    #: bad_score (``egress`` is the record's key; its score at the quarantine dropped)
    kind: str
    egress: str
    domain: str = ""
    until: float = 0.0
    detail: str = ""


def key_of(egress: str, domain: str = "") -> str:
    return f"{egress}|{domain}" if domain else egress


def split_key(key: str) -> tuple[str, str]:
    egress, _, domain = key.partition("|")
    return egress, domain


class HealthBook:
    def __init__(self, policy: HealthPolicy, clock: Clock):
        self.policy = policy
        self.clock = clock
        self.health: dict[str, Health] = {}
        #: keys whose health changed since the last sync
        self.dirty: set[str] = set()

    def of(self, egress: str, domain: str = "") -> Health:
        k = key_of(egress, domain)
        h = self.health.get(k)
        if h is None:
            h = self.health[k] = Health()
        return h

    def peek(self, egress: str, domain: str = "") -> Health | None:
        return self.health.get(key_of(egress, domain))

    def state(self, egress: str, domain: str = "") -> str:
        h = self.peek(egress, domain)
        return h.state(self.clock()) if h else HEALTHY

    def score(self, egress: str, domain: str = "") -> float:
        h = self.peek(egress, domain)
        return h.score(self.clock(), self.policy) if h else 1.0

    def take_dirty(self) -> dict[str, HealthRecord]:
        out = {k: self.health[k].to_record() for k in self.dirty if k in self.health}
        self.dirty.clear()
        return out

    def merge(self, records: dict[str, dict[str, Any]], known: Container[str]) -> list[Event]:
        """Take the state changes other workers made (newer ``changed`` wins); an
        ``adopted`` event for the egresses ``known`` (the pool's)."""
        events = []
        now, longest = self.clock(), self.policy.max_quarantine
        for k, rec in records.items():
            try:
                other = Health.from_record(rec, now, longest)
            except ValueError as e:  # shared state is untrusted: a record that does not decode is skipped
                events.append(Event("bad_record", k, detail=str(e)))
                continue
            note = clamp_note(rec, now, longest)
            if note is not None:
                events.append(Event("clamped", *split_key(k), other.until, note))
            bad_score = score_note(rec)
            if bad_score is not None:
                events.append(Event("bad_score", k, detail=bad_score))
            mine = self.health.get(k)
            if mine is None:
                self.health[k] = other
            elif other.changed > mine.changed:  # another worker's state change beats local evidence
                mine.adopt(other)
            else:
                continue
            egress, domain = split_key(k)
            if other.changed and egress in known:
                events.append(
                    Event("adopted", egress, domain, other.until, "quarantined" if other.until else "restored")
                )
        return events
