"""The simulated workers of ``bench_fleet`` (no Scrapy): each is a thread with a Redis
frontier store of its own, doing the store rounds a crawl does (``StoreSync.run``: the
writes in the order the scheduler queues them, the heartbeat, the fair share, the lease,
the counts) every 0.25 s, as the scheduler syncs.

The job: ``sites`` sites of ``pages`` pages each; page ``i`` of a site links to pages
``5i+1 .. 5i+5`` of the same site, taken modulo ``pages``: the first fifth of a site's
pages bring new links, the rest only links already seen (deduplicated by the store), so
every page is crawled once and a crawl of the whole job ends by itself. A crawled page
queues its 5 links (``enq`` ops) and then its ack, as a callback's requests come before
the ack of its response, except the links the worker knows the store holds (the
scheduler's ``KnownFingerprints``, ``SCALE_FRONTIER_KNOWN``: ``--known``). Each worker
"fetches" ``rate`` pages a second from what it has leased and leases as the scheduler
does (``local.lease_wanted``: back up to ``batch`` once it holds half of it or less;
before, every round topped it up, a lease call of one or two records a round for a slow
worker, which no crawl makes).

The meter counts, in this process, what the Redis client sends: round trips (packed
sends: a pipeline is one) and commands by name; the lease call's latency is timed around
``store.lease`` as the round makes it.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier.scheduling.known import KnownFingerprints
from scrapy_scale.frontier.scheduling.local import lease_wanted
from scrapy_scale.frontier.scheduling.sync import StoreSync, SyncPlan
from scrapy_scale.frontier.store import EnqueueResult, FrontierStore, NewRequest

ROUND = 0.25  # seconds between a worker's store rounds (the scheduler's sync interval)
FANOUT = 5
LEASE_SECONDS = 60.0

#: a request as the codec writes it (``codec.encode`` of a Request with a callback; a
#: followed link carries its depth in meta), the URL put in per page
SEED = '{"v":2,"r":{"url":"%s","callback":"parse"}}'
LINK = '{"v":2,"r":{"url":"%s","callback":"parse","meta":{"depth":%d}}}'


def page_url(site: int, page: int) -> str:
    return f"https://site{site}.example.test/item/{page}"


def new_request(site: int, page: int, depth: int = 0) -> NewRequest:
    url = page_url(site, page)
    data = LINK % (url, depth) if depth else SEED % url
    return NewRequest(hashlib.sha1(url.encode()).hexdigest(), data, f"site{site}.example.test")


def parse_data(data: str) -> tuple[int, int]:
    """(site, page) of a leased record's data."""
    url = data.split('"url":"', 1)[1].split('"', 1)[0]
    host, _, page = url[len("https://") :].partition("/item/")
    return int(host[len("site") : -len(".example.test")]), int(page)


def links(site: int, page: int, pages: int) -> list[NewRequest]:
    return [new_request(site, (FANOUT * page + k) % pages, 1) for k in range(1, FANOUT + 1)]


def page_ops(known: KnownFingerprints, site: int, page: int, pages: int) -> list[tuple[str, Any]]:
    """A crawled page's ``enq`` ops, as the scheduler queues them: a link this worker knows
    the store holds is counted there as a duplicate, not sent (``frontier/scheduling/known.py``)."""
    return [("enq", r) for r in links(site, page, pages) if not known.answered(r.fingerprint)]


def learn(known: KnownFingerprints, ops: list[tuple[str, Any]], out: Any) -> None:
    """What the scheduler's rounds learn of a sync: the store's answers, the leases."""
    known.learn_written(ops, out.enqueued)
    known.learn_leased(out.leased)


def open_fleet_store(url: str, job: str, partitions: int | None) -> FrontierStore:
    """The job's store; ``partitions`` (S) passed when not None and the store takes it."""
    from scrapy_scale.frontier.backends import open_store

    if partitions is None:
        return open_store(url, job)
    if "partitions" not in inspect.signature(open_store).parameters:
        raise SystemExit("--partitions: this version of the frontier has no partitions yet (S = 1)")
    return open_store(url, job, partitions=partitions)  # type: ignore[call-arg]


# ---- the meter -------------------------------------------------------------------------------


class Meter:
    """Round trips and commands the Redis client of this process sends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.round_trips = 0
        self.commands: Counter[str] = Counter()
        self.on = False

    def install(self) -> None:
        from redis import connection

        owner = next(c for c in connection.Connection.__mro__ if "send_packed_command" in c.__dict__)
        sender = next(c for c in connection.Connection.__mro__ if "send_command" in c.__dict__)
        packer = next(c for c in connection.Connection.__mro__ if "pack_commands" in c.__dict__)
        send_packed, send_command, pack_commands = (
            owner.send_packed_command,  # type: ignore[attr-defined]
            sender.send_command,  # type: ignore[attr-defined]
            packer.pack_commands,  # type: ignore[attr-defined]
        )
        meter = self

        def counted_send_packed(conn: Any, command: Any, check_health: bool = True) -> Any:
            if meter.on:
                with meter.lock:
                    meter.round_trips += 1
            return send_packed(conn, command, check_health)

        def counted_send_command(conn: Any, *args: Any, **kwargs: Any) -> Any:
            if meter.on and args:
                meter.count([args[0]])
            return send_command(conn, *args, **kwargs)

        def counted_pack_commands(conn: Any, commands: Any) -> Any:
            commands = list(commands)
            if meter.on:
                meter.count([c[0] for c in commands if c])
            return pack_commands(conn, commands)

        owner.send_packed_command = counted_send_packed  # type: ignore[attr-defined]
        sender.send_command = counted_send_command  # type: ignore[attr-defined]
        packer.pack_commands = counted_pack_commands  # type: ignore[attr-defined]

    def count(self, names: list[Any]) -> None:
        with self.lock:
            for n in names:
                self.commands[(n.decode() if isinstance(n, bytes) else str(n)).split()[0].lower()] += 1


# ---- a worker --------------------------------------------------------------------------------


@dataclass
class WorkerResult:
    crawled: int = 0
    enqueued_new: int = 0
    rounds: int = 0
    lease_ms: list[float] = field(default_factory=list)
    round_ms: list[float] = field(default_factory=list)
    error: str = ""


def run_worker(
    make_store: Callable[[], FrontierStore],
    name: str,
    pages: int,
    rate: float,
    batch: int,
    ready: Callable[[], None],
    go: threading.Event,
    stop: threading.Event,
    seeded: threading.Event,
    known_capacity: int = frontier_settings.KNOWN.default,
) -> WorkerResult:
    """One simulated worker until ``stop`` or, once ``seeded``, the job has nothing left."""
    res = WorkerResult()
    store = make_store()
    try:
        store.begin_run()  # joins the run the parent began
        sync = StoreSync(store, lease_seconds=LEASE_SECONDS, error_deadline=600, floor=min(16, batch))
        sync.worker = name
        lease = store.lease

        def timed_lease(worker: str, n: int, seconds: float) -> Any:
            t = time.perf_counter()
            got = lease(worker, n, seconds)
            res.lease_ms.append(1000 * (time.perf_counter() - t))
            return got

        store.lease = timed_lease  # type: ignore[method-assign]
        held: list[Any] = []
        known = KnownFingerprints(known_capacity)
        ready()
        go.wait()
        credit, last = 0.0, time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            credit = min(credit + rate * (now - last), float(batch))
            last = now
            ops: list[tuple[str, Any]] = []
            n = min(int(credit), len(held))
            credit -= n
            for x in held[:n]:
                site, page = parse_data(x.data)
                ops += page_ops(known, site, page, pages)
                ops.append(("ack", (x.fingerprint, x.token)))
            del held[:n]
            t = time.perf_counter()
            out = sync.run(SyncPlan(ops=ops, want=lease_wanted(len(held), batch, 0), held=len(held)))
            learn(known, ops, out)
            res.round_ms.append(1000 * (time.perf_counter() - t))
            res.rounds += 1
            res.crawled += out.acked
            res.enqueued_new += sum(1 for e in out.enqueued if e is EnqueueResult.ADDED)
            held += [x for x in out.leased if not x.error]
            c = out.counts
            if seeded.is_set() and not held and not (c["pending"] or c["delayed"] or c["leased"]):
                break
            time.sleep(max(0.0, ROUND - (time.monotonic() - now)))
        if held:
            store.release(name, [x.fingerprint for x in held])
    except Exception as e:  # noqa: BLE001 - reported by the parent, the benchmark then fails
        res.error = f"{type(e).__name__}: {e}"
        stop.set()
    finally:
        store.close()
    return res


def worker_process(
    conn: Any,
    url: str,
    job: str,
    partitions: int | None,
    names: list[str],
    pages: int,
    rate: float,
    batch: int,
    known: int = frontier_settings.KNOWN.default,
) -> None:
    """A process of ``len(names)`` worker threads, driven over the pipe ``conn``: it says
    "ready" and takes "go", "seeded" and "stop"; once every worker ended it sends back
    their results and its meter's counts."""
    meter = Meter()
    meter.install()
    go, stop, seeded = threading.Event(), threading.Event(), threading.Event()
    results: list[WorkerResult] = []
    lock = threading.Lock()
    count = [0]
    all_ready = threading.Event()

    def ready() -> None:
        with lock:
            count[0] += 1
            if count[0] == len(names):
                all_ready.set()

    def body(name: str) -> None:
        r = run_worker(
            lambda: open_fleet_store(url, job, partitions), name, pages, rate, batch, ready, go, stop, seeded, known
        )
        with lock:
            results.append(r)

    threads = [threading.Thread(target=body, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    all_ready.wait(120)  # a worker that failed to open never says ready: its error comes back
    conn.send("ready")
    while any(t.is_alive() for t in threads):  # until every worker ended, or "stop"
        if not conn.poll(0.1):
            continue
        msg = conn.recv()
        if msg == "go":
            meter.on = True
            go.set()
        elif msg == "seeded":
            seeded.set()
        elif msg == "stop":
            stop.set()
    for t in threads:
        t.join()
    meter.on = False
    conn.send({"pid": os.getpid(), "results": results, "round_trips": meter.round_trips, "commands": meter.commands})
