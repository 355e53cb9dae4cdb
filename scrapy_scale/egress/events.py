"""The log lines and stats of the pool's state changes (:class:`~.pool.Event`): a
quarantine, a restore, a retired group, another worker's change, bad values read
from the shared state (one WARNING per kind per crawl), and failing syncs of the shared
state (:class:`SyncOutage`: one line when they start failing, one when they work again)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scrapy_scale import stats_keys as K
from scrapy_scale.egress.health_book import Event
from scrapy_scale.egress.report import when

logger = logging.getLogger("scrapy_scale.egress.middleware")  # the lines users know, under their logger


class EventReport:
    def __init__(self, stats: Any, browser: Any, where: Callable[[], str | None]):
        self.stats = stats
        self.browser = browser
        self.where = where
        self._warned: set[str] = set()  # kinds of bad shared state already warned about

    def report(self, ev: Event) -> None:
        until = when(ev.until) if ev.until else ""
        where = f" for {ev.domain}" if ev.domain else ""
        if ev.kind in ("quarantined", "requarantined"):
            again = " again (its re-probe failed)" if ev.kind == "requarantined" else ""
            logger.info("egress %s quarantined%s%s until %s", ev.egress, where, again, until)
            if not ev.domain:
                self.browser.evicted(ev.egress)
            self.stats.inc_value(K.EGRESS_EVICTIONS_DOMAIN if ev.domain else K.EGRESS_EVICTIONS)
        elif ev.kind == "restored":
            logger.info("egress %s restored%s (its re-probe succeeded)", ev.egress, where)
            self.stats.inc_value(K.EGRESS_RESTORED)
        elif ev.kind == "group_retired":
            logger.warning(
                "egress group %s retired: %s together; all its members are quarantined (each "
                "re-probed on its own) until %s at most",
                ev.egress,
                ev.detail,
                until,
            )
            self.stats.inc_value(K.EGRESS_GROUPS_RETIRED)
        elif ev.kind == "bad_record":
            self.warn_once(
                "bad_record",
                "egress: skipping health record %r of the shared state (%s): it does not decode: %s",
                ev.egress,
                self.where(),
                ev.detail,
            )
        elif ev.kind == "bad_score":
            self.warn_once(
                "bad_score", "egress: the shared state's record %r (%s): %s", ev.egress, self.where(), ev.detail
            )
        elif ev.kind == "clamped":
            self.warn_once(
                "clamped",
                "egress: the shared state's record of %s%s: %s; it ends at %s instead",
                ev.egress,
                where,
                ev.detail,
                until,
            )
        elif ev.kind == "adopted":
            logger.info(
                "egress %s %s%s by another worker (shared state)%s",
                ev.egress,
                ev.detail,
                where,
                f" until {until}" if ev.detail == "quarantined" else "",
            )

    def warn_once(self, kind: str, msg: str, *args: Any) -> None:
        """One WARNING per kind of bad shared state per crawl (the rest at DEBUG): the same
        bad value is read again at every sync."""
        self.stats.inc_value(K.egress_state_skipped(kind))
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        logger.log(level, msg, *args)


class SyncOutage:
    """Failing syncs of the pool's shared state (a Redis outage): say so once when they
    start failing and once when they work again (each worker logged "egress: cannot sync"
    at every sync, once a second: 92 lines an outage). Plain Python; ``now`` from any clock."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.failures = 0

    def failed(self, now: float) -> bool:
        """A sync failed: True when this starts an outage (log it)."""
        self.failures += 1
        if self.since is None:
            self.since = now
            return True
        return False

    def succeeded(self, now: float) -> tuple[int, float] | None:
        """A sync worked: ``(failed syncs, seconds)`` of the outage it ends, or None."""
        if self.since is None:
            return None
        out = (self.failures, max(0.0, now - self.since))
        self.since, self.failures = None, 0
        return out
