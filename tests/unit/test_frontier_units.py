"""The scheduler's units, each driven through its public methods (plain Python, a real
SQLite store where a store is needed, no reactor): the in-flight ledger, the lease
buffer, what waits, the store sync, record identity."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.records.identity import RecordIdentity, new_record
from scrapy_scale.frontier.scheduling.lease_buffer import LeaseBuffer
from scrapy_scale.frontier.scheduling.ledger import OUTCOME_GRACE, OVERDUE_SLACK, InFlight, InFlightLedger
from scrapy_scale.frontier.scheduling.local import Outbox
from scrapy_scale.frontier.scheduling.scrapy_stats import ScrapyStats
from scrapy_scale.frontier.scheduling.stats import FrontierStats
from scrapy_scale.frontier.scheduling.sync import StoreSync, SyncPlan
from scrapy_scale.frontier.scheduling.waiting import HELD_CAP, Waiting
from scrapy_scale.frontier.store import EnqueueResult, FrontierStore, Leased, NewRequest
from scrapy_scale.outcomes.model import FailureClass, Outcome

pytestmark = pytest.mark.pure


def stats() -> tuple[MemoryStatsCollector, FrontierStats]:
    raw = MemoryStatsCollector(get_crawler())
    raw.open_spider()
    return raw, FrontierStats(raw)


def done(fp: str, items: int = 0) -> Outcome:
    return Outcome(fingerprint=fp, url="http://a.test/", domain="a.test", cls=FailureClass.OK, items=items, final=True)


# ---- the in-flight ledger -----------------------------------------------------------------


class Engine:
    """What the ledger is told about the engine: the requests it holds, the fallbacks sent."""

    def __init__(self) -> None:
        self.holds: set[Any] = set()
        self.fallbacks: list[tuple[str, bool, int]] = []

    def in_progress(self) -> set[Any]:
        return self.holds

    def fallback(self, request: Request, responded: bool, items: int) -> None:
        self.fallbacks.append((request.url, responded, items))


def ledger() -> tuple[InFlightLedger, Outbox, Engine, MemoryStatsCollector]:
    raw, st = stats()
    outbox, engine = Outbox(), Engine()
    return InFlightLedger(outbox, st, engine.in_progress, engine.fallback), outbox, engine, raw


def test_the_ledger_acks_after_the_engine_lets_go_and_once_the_items_are_seen() -> None:
    led, outbox, engine, _ = ledger()
    led.signal_mode = True
    r = Request("http://a.test/1", meta={meta_keys.FINGERPRINT: "f1"})
    led.add("f1", InFlight(7, r.url, 0, r))
    engine.holds.add(r)
    led.on_outcome(done("f1", items=1))
    assert not outbox.ops  # one item still to come
    led.on_item(item={}, response=type("R", (), {"request": r})())
    assert not outbox.ops and "f1" in led  # settled, but the engine still holds it (children first)
    led.settle_finished()
    assert not outbox.ops
    engine.holds.clear()
    led.settle_finished()
    assert outbox.ops == [("ack", ("f1", 7))] and "f1" not in led


def test_the_ledger_sends_the_fallback_for_a_request_no_outcome_covered() -> None:
    led, outbox, engine, raw = ledger()
    r = Request("http://a.test/2")
    led.add("f2", InFlight(3, r.url, 0, r))
    led.on_response(request=Request("http://a.test/2", meta={meta_keys.FINGERPRINT: "f2"}))
    led.settle_finished()  # plain Scrapy (no outcome middlewares): the engine is done with it
    assert engine.fallbacks == [("http://a.test/2", True, 0)]
    assert outbox.ops == [("ack", ("f2", 3))]  # no receiver settled it: acked as responded
    assert not raw.get_value("scale/frontier/acked_without_outcome")
    led.signal_mode = True
    r3 = Request("http://a.test/3")
    led.add("f3", InFlight(4, r3.url, 0, r3))
    led.settle_finished()
    assert len(engine.fallbacks) == 1  # within OUTCOME_GRACE of the engine letting go: wait
    assert OUTCOME_GRACE > 1


def test_a_request_in_flight_past_the_download_timeout_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    """A download or a callback that never ends: the engine holds the request, its lease
    is renewed, the crawl stays open; the ledger names it once, past DOWNLOAD_TIMEOUT + slack."""
    led, _, engine, raw = ledger()
    stuck = Request("http://a.test/stuck?token=secret")
    fine = Request("http://a.test/fine")
    led.add("f1", InFlight(1, stuck.url, 0, stuck, handed_at=100.0))
    led.add("f2", InFlight(2, fine.url, 0, fine, handed_at=200.0))
    led.add("f3", InFlight(3, "http://a.test/unknown", 0, None))  # no hand-out time: never named
    engine.holds.update({stuck, fine})
    slack = OVERDUE_SLACK
    assert led.warn_overdue(100.0 + 30 + slack, download_timeout=30) == 0  # not past it yet
    with caplog.at_level("WARNING"):
        assert led.warn_overdue(100.0 + 30 + slack + 1, download_timeout=30) == 1
        assert led.warn_overdue(100.0 + 30 + slack + 50, download_timeout=30) == 0  # once
    lines = [r.getMessage() for r in caplog.records if "handed to the engine" in r.getMessage()]
    assert len(lines) == 1 and "http://a.test/stuck" in lines[0] and "91 s ago" in lines[0]
    assert raw.get_value("scale/frontier/overdue") == 1
    assert led.warn_overdue(10_000.0, download_timeout=30) == 1  # the other one, later
    assert led.warn_overdue(float("inf"), download_timeout=float("nan")) == 0  # nothing left, no crash


# ---- the lease buffer -----------------------------------------------------------------------


class Timers:
    def __init__(self) -> None:
        self.calls: list[tuple[float, Any]] = []

    def call_later(self, seconds: float, fn: Any) -> Any:
        self.calls.append((seconds, fn))
        return type("Call", (), {"active": lambda self: True, "cancel": lambda self: None})()


def test_the_buffer_serves_memory_requests_once_their_record_is_written_and_times_the_due_sync() -> None:
    raw, st = stats()
    outbox, timers, fired = Outbox(), Timers(), []
    buf = LeaseBuffer(outbox, st, ScrapyStats(raw), due=lambda: fired.append(1), call_later=timers.call_later)
    r = Request("http://a.test/m", meta={meta_keys.FINGERPRINT: "fm"})
    buf.keep_in_memory(
        r, "fm", False, codec.NotStorable("Opaque", "no"), worker="w/0", lease_seconds=60.0, prior_token=None
    )
    assert len(buf) == 0 and outbox.enqueues == 1  # its dedup record goes first
    (op,) = outbox.take().ops
    buf.held_written([op], [EnqueueResult.ADDED])
    assert len(buf) == 1 and buf.fingerprints() == ["fm"]
    served = buf.serve(buf.next_entry(), None, codec.RecordRules())  # type: ignore[arg-type]
    assert served is not None and served.request is r and served.fingerprint == "fm" and served.token == 0
    assert raw.get_value("scale/frontier/unserializable/Opaque") == 1
    buf.sync_at(10**10)
    assert len(timers.calls) == 1
    timers.calls[0][1]()
    assert fired == [1]
    buf.closing = True
    buf.sync_at(10**10)
    assert len(timers.calls) == 1  # closing: no more timers


def test_the_buffer_dead_letters_a_record_it_cannot_read() -> None:
    raw, st = stats()
    outbox = Outbox()
    buf = LeaseBuffer(outbox, st, ScrapyStats(raw), due=lambda: None)
    buf.take_leased([Leased("bad", "{not json", "a.test", 0, 0, 0.0, 0.0, 1)])
    assert buf.ready() == 1 and raw.get_value("scale/frontier/leased") == 1
    assert buf.serve(buf.next_entry(), None, codec.RecordRules()) is None  # type: ignore[arg-type]
    assert outbox.ops and outbox.ops[0][0] == "dead"
    assert raw.get_value("scale/frontier/dead_lettered") == 1


def test_requests_held_by_a_full_download_slot_are_not_counted_ready() -> None:
    """A buffer holding only the requests of sites whose download slot is full counted them
    ready, so it leased nothing more while other sites' requests waited in the store."""
    raw, st = stats()
    buf = LeaseBuffer(Outbox(), st, ScrapyStats(raw), due=lambda: None, call_later=Timers().call_later)
    asked: list[str] = []
    buf.slot_full = lambda domain: asked.append(domain) or domain == "full.test"
    buf.take_leased([Leased(f"f{i}", "{}", "full.test", 0, 0, 0.0, 0.0, i) for i in range(3)])
    assert buf.ready() == 3
    assert buf.next_entry() is None and asked == ["full.test"]  # the slot check ran
    assert buf.ready() == 0 and len(buf) == 3  # held, not ready: the next sync leases more
    assert buf.unpaced() == 3  # but a full slot alone does not start a sync at every ask
    buf.take_leased([Leased("o1", "{}", "other.test", 0, 0, 0.0, 0.0, 9)])
    entry = buf.next_entry()
    assert entry is not None and entry.fingerprint == "o1"


class FarPacer:
    """A pacer that holds every site far in the future (every leased request is deferred)."""

    def hold_until(self, domain: str) -> float:
        return time.time() + 10_000.0

    def spacing(self, domain: str) -> float:
        return 1.0

    def handed_out(self, request: Any, domain: str, fingerprint: str | None) -> None:  # pragma: no cover
        raise AssertionError("nothing is due")


def test_a_deferral_carries_its_lease_token_and_a_stale_answer_counts_as_a_stale_ack() -> None:
    """A leased request handed back to the store until its turn names its lease token, so
    the store refuses it once the lease passed on (a worker frozen past its lease)."""
    raw, st = stats()
    outbox = Outbox()
    buf = LeaseBuffer(outbox, st, ScrapyStats(raw), due=lambda: None, call_later=Timers().call_later)
    buf.pacer = FarPacer()  # type: ignore[assignment]
    buf.take_leased([Leased("fa", "{}", "a.test", 0, 0, 0.0, 0.0, 7)])
    assert buf.next_entry() is None
    assert raw.get_value("scale/frontier/deferred") == 1  # the deferral path ran
    ((kind, nr),) = outbox.take().ops
    assert kind == "enq" and nr.update and nr.token == 7
    st.enqueued([EnqueueResult.STALE])
    assert raw.get_value("scale/frontier/stale_acks") == 1


# ---- what waits -------------------------------------------------------------------------------


def test_what_waits_counts_a_syncs_writes_and_carries_a_higher_priority_it_did_not_lease() -> None:
    outbox = Outbox()
    w = Waiting(outbox)
    outbox.append(("enq", NewRequest("f", "{}", "a.test", priority=5)), 5)
    assert w.queued() == 1 and w.top() == 5 and w.for_this_worker()
    assert w.lease_want(outbox.ops, buffer_top=0, ready=8, buffered=8, batch=8) == 1  # outranks a full buffer
    written = w.take()
    assert w.queued() == 1 and w.any_write()  # a running sync's enqueues still wait
    assert w.written() is written
    w.carry(False, written, buffer_top=0)  # written, not leased: the next sync leases it
    assert w.pending_top == 5 and w.for_this_worker()
    w.carry(True, None, buffer_top=0)
    assert w.pending_top is None
    assert w.lease_want([], buffer_top=None, ready=0, buffered=HELD_CAP * 8, batch=8) == 0  # bounded


# ---- the store sync ---------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = open_store(f"sqlite:///{tmp_path / 'f.db'}", "units", clock=FakeClock())
    s.begin_run()
    yield s
    s.close()


def nr(url: str) -> NewRequest:
    return codec.new_request(Request(url))


def test_one_plan_in_one_result_out(store: FrontierStore) -> None:
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600.0)
    sync.worker = "w/0"
    a, b = nr("http://a.test/1"), nr("http://b.test/1")
    res = sync.run(SyncPlan([("enq", a), ("enq", b)], want=1))
    assert res.enqueued == [EnqueueResult.ADDED, EnqueueResult.ADDED] and len(res.leased) == 1
    assert res.counts["pending"] == 1 and res.counts["leased"] == 1
    lz = res.leased[0]
    res = sync.run(SyncPlan([("ack", (lz.fingerprint, lz.token)), ("ack", (lz.fingerprint, lz.token + 1))]))
    assert res.acked == 1 and res.stale == 1
    res = sync.flush([], lease=5)
    assert len(res.leased) == 1 and res.counts["leased"] == 1
    res = sync.run(SyncPlan([("ack", (res.leased[0].fingerprint, res.leased[0].token))], finish=True))
    assert res.finished_run


def test_a_rounds_acks_are_written_after_its_links_in_one_call_and_a_link_to_an_acked_page_stays_after_it(
    store: FrontierStore,
) -> None:
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600.0)
    sync.worker = "w/0"
    pages = [nr(f"http://a.test/{i}") for i in range(3)]
    sync.run(SyncPlan([("enq", p) for p in pages]))
    leased = {x.fingerprint: x for x in sync.run(SyncPlan(want=3)).leased}
    assert len(leased) == 3
    calls: list[tuple[str, int]] = []
    enqueue, ack = store.enqueue, store.ack

    def counted_enqueue(requests: Any) -> Any:
        calls.append(("enq", len(requests)))
        return enqueue(requests)

    def counted_ack(worker: str, done: Any) -> Any:
        calls.append(("ack", len(done)))
        return ack(worker, done)

    store.enqueue = counted_enqueue  # type: ignore[method-assign]
    store.ack = counted_ack  # type: ignore[method-assign]
    a, b, c = (leased[p.fingerprint] for p in pages)
    ops: list[tuple[str, Any]] = []
    for i, page in enumerate((a, b)):  # each page: its two links, then its ack
        ops += [("enq", nr(f"http://a.test/{i}/x")), ("enq", nr(f"http://a.test/{i}/y"))]
        ops.append(("ack", (page.fingerprint, page.token)))
    res = sync.run(SyncPlan(ops))
    assert calls == [("enq", 4), ("ack", 2)]  # two calls, not four
    assert res.enqueued == [EnqueueResult.ADDED] * 4 and res.acked == 2
    # then page c is acked and fetched once more (dont_filter) in the same round: that
    # enqueue names c's record, so it stays after the ack and reopens the done record
    # (before the ack it would find c leased and make a record of its own)
    calls.clear()
    again = new_record(Request("http://a.test/2", dont_filter=True), c.fingerprint, False, pages[2].data, dedup=True)
    ops = [("enq", pages[0]), ("ack", (c.fingerprint, c.token)), ("enq", again), ("enq", nr("http://a.test/c/new"))]
    res = sync.run(SyncPlan(ops))
    assert calls == [("enq", 1), ("ack", 1), ("enq", 2)]
    assert res.enqueued == [EnqueueResult.DUPLICATE, EnqueueResult.REOPENED, EnqueueResult.ADDED]
    assert store.get(c.fingerprint)["state"] == "pending"  # type: ignore[index]


def test_a_failed_round_backs_off_and_an_error_that_cannot_pass_stops(store: FrontierStore) -> None:
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600.0)
    assert not sync.may_start()  # no store thread yet
    assert sync.failed(sqlite3.OperationalError("database or disk is full")) is None
    assert sync.failing and sync.trouble.failures == 1
    why = sync.failed(sqlite3.DatabaseError("file is not a database"))
    assert why is not None and "corrupt" in why
    assert sync.give_up(why) and not sync.give_up("again") and sync.fatal == why


# ---- record identity ----------------------------------------------------------------------------


def test_a_retry_and_a_redirect_continue_their_record_a_copied_meta_does_not() -> None:
    crawler = get_crawler()
    ident = RecordIdentity(crawler.request_fingerprinter)
    first = Request("http://a.test/old")
    fp, update = ident.key(first, lambda k: None)
    assert not update and first.meta[meta_keys.FINGERPRINT] == fp
    in_flight = {fp: "http://a.test/old"}
    retry = first.replace(dont_filter=True, meta={**first.meta, meta_keys.ATTEMPT: 2})
    assert ident.key(retry, in_flight.get) == (fp, True)
    moved = Request("http://a.test/new", meta={meta_keys.FINGERPRINT: fp, "redirect_urls": ["http://a.test/old"]})
    assert ident.key(moved, in_flight.get) == (fp, True)
    copied = Request("http://a.test/other", meta={meta_keys.FINGERPRINT: fp, meta_keys.ATTEMPT: 3})
    other, update = ident.key(copied, in_flight.get)
    assert other != fp and not update and meta_keys.ATTEMPT not in copied.meta  # a chain of its own
    rec = new_record(retry, fp, True, "{}", dedup=True)
    assert rec.update and rec.attempts == 1 and not rec.reopen
    again = new_record(Request("http://a.test/old", dont_filter=True), fp, False, "{}", dedup=True)
    assert again.reopen and again.again.startswith(fp + "~")
