"""The scheduler's life on the reactor: its tick, its hooks into the engine, and its end.

:class:`Lifecycle` starts the tick (every :data:`TICK` s: finished requests settled, a
sync started, now and then the requests in flight too long named), puts the engine glue
in (:mod:`.engine_glue`), and ends the scheduler one of two ways:

- ``close``: the spider closed. The running sync ends, one final sync writes the outbox,
  gives back the leases still held and finishes the run if asked, then the store closes.
- the reactor stops before the spider closed (a second Ctrl-C): what is settled is
  written within :data:`SHUTDOWN_WRITE_SECONDS`; the leases stay, and the restarted
  worker takes them back at once.

It owns the tick loop, the engine hooks and the shutdown trigger; it works on the units
it is given and calls back only the typed callables of :meth:`Lifecycle.start`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task

from scrapy_scale import compat
from scrapy_scale.frontier.scheduling.engine_glue import install_backout, install_empty_gate
from scrapy_scale.frontier.scheduling.lease_buffer import LeaseBuffer
from scrapy_scale.frontier.scheduling.ledger import InFlightLedger
from scrapy_scale.frontier.scheduling.local import Outbox
from scrapy_scale.frontier.scheduling.rounds import Rounds
from scrapy_scale.frontier.scheduling.scrapy_stats import ScrapyStats
from scrapy_scale.frontier.scheduling.sync import StoreSync
from scrapy_scale.frontier.store import FrontierStore

logger = logging.getLogger(__name__)

TICK = 0.25
#: ticks between two looks for requests in flight too long (InFlightLedger.warn_overdue)
OVERDUE_EVERY = 20
#: longest wait for the last writes when the reactor stops before the spider closed
SHUTDOWN_WRITE_SECONDS = 3.0


class Lifecycle:
    def __init__(
        self,
        *,
        store: FrontierStore,
        sync: StoreSync,
        outbox: Outbox,
        buffer: LeaseBuffer,
        inflight: InFlightLedger,
        rounds: Rounds,
        scrapy_stats: ScrapyStats,
        wait_for_seeds: bool,
        download_timeout: float,
        monotonic: Callable[[], float] = time.monotonic,
        reactor: Any = None,
    ):
        self.store = store
        self.sync = sync
        self.outbox = outbox
        self.buffer = buffer
        self.inflight = inflight
        self.rounds = rounds
        self.scrapy_stats = scrapy_stats
        #: the run is never finished at close (the workers wait for seeds)
        self.wait_for_seeds = wait_for_seeds
        self.download_timeout = download_timeout
        self.monotonic = monotonic
        #: the reactor for the loop, the trigger and the shutdown bound (None: the one installed)
        self.reactor = reactor
        #: the scheduler ends (closed, or the reactor stops): no more ticks, syncs or due timers
        self.closing = False
        #: ticks so far
        self.ticks = 0
        self._loop: task.LoopingCall | None = None
        self._unhook: Callable[[], None] = lambda: None
        self._shutdown_trigger: Any = None

    def start(self, engine: Any, has_work: Callable[[], bool], backs_out: Callable[[], bool]) -> None:
        """The tick, the engine glue (``scheduler_empty`` dropped while ``has_work()``,
        ``needs_backout()`` also True while ``backs_out()``) and the reactor's shutdown
        trigger. The store thread runs already."""
        self._loop = task.LoopingCall(self.tick)
        self._loop.clock = self._reactor()
        self._loop.start(TICK, now=False)
        remove_gate = install_empty_gate(engine, has_work)
        remove_backout = install_backout(engine, backs_out)
        self._unhook = lambda: (remove_gate(), remove_backout())[-1]
        self._shutdown_trigger = self._reactor().addSystemEventTrigger("before", "shutdown", self.reactor_stops)

    def tick(self) -> None:
        self.inflight.settle_finished()
        self.rounds.kick()
        self.ticks += 1
        if self.ticks % OVERDUE_EVERY == 0:  # a download or a callback that never ends is named
            self.inflight.warn_overdue(self.monotonic(), self.download_timeout)

    def _reactor(self) -> Any:
        return self.reactor if self.reactor is not None else compat.installed_reactor()

    def _end(self) -> None:
        self.closing = self.buffer.closing = self.rounds.closing = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    # ---- the two ends ----------------------------------------------------------------------

    def reactor_stops(self) -> defer.Deferred[Any] | None:
        """The reactor stops without the spider being closed (a second Ctrl-C): write
        what is settled (outbox, finished acks) within SHUTDOWN_WRITE_SECONDS, then let
        the process exit (the store thread is a daemon). Leases stay; the restarted
        worker takes them back at once."""
        if self.closing or not self.sync.started:
            return None
        self._end()
        self.inflight.settle_finished(closing=True)
        ops = self.outbox.take().ops
        logger.warning(
            "frontier: the reactor stops before the spider closed; writing %d settled op(s), "
            "leases are taken back by the next run",
            len(ops),
        )
        d = self.sync.last_writes(ops)
        d.addTimeout(SHUTDOWN_WRITE_SECONDS, self._reactor())
        d.addErrback(lambda f: logger.error("frontier: final write at shutdown failed: %s", f.getErrorMessage()))
        return d

    def close(self, reason: str) -> defer.Deferred[None]:
        """The spider closed: the final writes, then the store and its thread close."""
        self._end()
        self.buffer.cancel_timer()
        return defer.ensureDeferred(self._close(reason))

    async def _close(self, reason: str) -> None:
        self._unhook()
        while self.sync.running is not None:
            await self.sync.running
        self.inflight.settle_finished(closing=True)
        held = self.buffer.fingerprints() + list(self.inflight)
        ops = self.outbox.take().ops
        finish = reason == "finished" and not self.wait_for_seeds
        if self.sync.fatal is not None:  # the store cannot be trusted with more writes
            logger.error("frontier closed without its final writes: %s", self.sync.fatal)
            self.store.close()
            self.sync.stop_thread()
            return
        try:
            self.rounds.closed(ops, await self.sync.final(ops, held, finish), reason)
        except Exception:  # noqa: BLE001 - closing must not raise; leases expire anyway
            logger.exception("frontier: final write failed; unacked leases will expire and be retried")
        finally:
            self.buffer.clear()
            self.inflight.clear()
            self.scrapy_stats.clear()
            self.store.close()
            self.sync.stop_thread()
            if self._shutdown_trigger is not None:
                self._reactor().removeSystemEventTrigger(self._shutdown_trigger)
                self._shutdown_trigger = None
