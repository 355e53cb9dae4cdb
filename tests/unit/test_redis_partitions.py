"""A job's Redis frontier in partitions (scrapy_scale/frontier/backends/redis/partitions.py),
the plain-Python part: which partition a site goes to (stable across processes, spread),
the key names (that a site's partition is the same in another process: in
tests/crawl/test_redis_store_partitions.py), how a lease call splits its batch over the partitions (no partition
starves, none is asked twice in a row when another has work) and orders it, and the stored
count read back (a hostile one refused)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from scrapy_scale.frontier.backends.redis import partitions as P

pytestmark = pytest.mark.pure

DOMAINS = [f"site{i}.example" for i in range(2000)]


def test_partition_0_keeps_todays_keys_and_the_others_have_their_own_hash_tag() -> None:
    assert P.key_of("books", 0, 12) == P.key_of("books", 0, 1) == "scale:{books}"
    tags = {P.key_of("books", i, 12).split("{", 1)[1].split("}", 1)[0] for i in range(12)}
    assert len(tags) == 12  # 12 hash tags: 12 slots
    # no job's partition is another job's key: '/' is never in a job name
    assert all(t.startswith("books/p") for t in tags - {"books"})


def test_the_tags_are_the_same_in_every_version() -> None:
    """A job's keys must be found again by the next release: these names are stored data."""
    assert P.keys_of("books", 12) == (
        "scale:{books}",
        "scale:{books/p1.42}",
        "scale:{books/p2.0}",
        "scale:{books/p3.40}",
        "scale:{books/p4.13}",
        "scale:{books/p5.50}",
        "scale:{books/p6.11}",
        "scale:{books/p7.55}",
        "scale:{books/p8.21}",
        "scale:{books/p9.13}",
        "scale:{books/p10.6}",
        "scale:{books/p11.13}",
    )
    # a job of the first naming keeps it
    assert P.keys_of("books", 3, by_slot=False) == ("scale:{books}", "scale:{books/p1}", "scale:{books/p2}")


def test_a_tags_slot_is_redis_clusters() -> None:
    """CRC16 (XMODEM) modulo 16384, the values Redis's own documentation gives."""
    assert P.slot_of("123456789") == 0x31C3
    assert P.slot_of("somekey") == 11058
    assert P.slot_of("hash_tag") == 2515  # CLUSTER KEYSLOT foo{hash_tag}


def test_the_windows_tile_the_slot_space() -> None:
    for parts in (1, 2, 3, 7, 12, 100, P.MAX_PARTITIONS):
        starts = [P.window_start(k, parts) for k in range(parts + 1)]
        assert starts[0] == 0 and starts[-1] == P.SLOTS and all(b > a for a, b in zip(starts, starts[1:], strict=False))
        for k in range(parts):
            assert P.window_of(starts[k], parts) == k == P.window_of(starts[k + 1] - 1, parts)


def test_every_window_holds_one_partition_whatever_the_job() -> None:
    for job in ("books", "a", "fleet-1a2b3c4d", "x" * 100, "job.with-dots_1"):
        for parts in (2, 3, 12, 48, 250):
            keys = P.keys_of(job, parts)
            windows = [P.window_of(P.slot_of(k.split("{", 1)[1].split("}", 1)[0]), parts) for k in keys]
            assert sorted(windows) == list(range(parts)), (job, parts)
            # partition i in the i-th window after partition 0's
            assert all(w == (windows[0] + i) % parts for i, w in enumerate(windows))


def test_the_most_partitions_are_named_too() -> None:
    keys = P.keys_of("books", P.MAX_PARTITIONS)
    assert len(set(keys)) == P.MAX_PARTITIONS


def redis_cli_ranges(primaries: int) -> list[tuple[int, int]]:
    """The slots `redis-cli --cluster create` gives each primary (redis-cli.c: a float
    cursor advanced by 16384 / primaries, each last slot rounded; the last primary to 16383)."""
    per, cursor, first, out = P.SLOTS / primaries, 0.0, 0, []
    for k in range(primaries):
        last = P.SLOTS - 1 if k == primaries - 1 else int(cursor + per - 1 + 0.5)
        out.append((first, last))
        first, cursor = last + 1, cursor + per
    return out


@pytest.mark.parametrize("primaries", [1, 2, 3, 4, 5, 6, 7, 10, 16])
def test_on_evenly_split_slots_each_primary_holds_its_share_of_the_partitions(primaries: int) -> None:
    """What the goal asks (each shard within +-20% of its share): with the default count (4 per
    primary) or another multiple, every job's partitions split evenly; with the first naming
    (a slot at random) most jobs' do not."""
    ranges = redis_cli_ranges(primaries)

    def per_primary(keys: tuple[str, ...]) -> list[int]:
        slots = [P.slot_of(k.split("{", 1)[1].split("}", 1)[0]) for k in keys]
        return [sum(a <= s <= b for s in slots) for a, b in ranges]

    jobs = [f"job-{n}" for n in range(40)]
    for mult in (1, 4, 8):
        parts = mult * primaries
        for job in jobs:
            assert per_primary(P.keys_of(job, parts)) == [mult] * primaries, (job, parts)
    if primaries == 3:
        even = [per_primary(P.keys_of(job, 12, by_slot=False)) == [4, 4, 4] for job in jobs]
        assert sum(even) < len(jobs) / 2


def test_one_partition_is_partition_0_for_every_site() -> None:
    assert {P.partition_of(d, 1) for d in DOMAINS} == {0}


def test_sites_spread_evenly_over_the_partitions() -> None:
    for parts in (3, 12, 48):
        got = Counter(P.partition_of(d, parts) for d in DOMAINS)
        mean = len(DOMAINS) / parts
        assert set(got) == set(range(parts))
        assert max(got.values()) <= 1.35 * mean and min(got.values()) >= 0.65 * mean, (parts, got)


def test_the_default_is_one_on_a_single_node_and_four_per_primary_on_a_cluster() -> None:
    assert P.default_parts(None) == 1
    assert P.default_parts(3) == 12
    assert P.default_parts(10_000) == P.MAX_PARTITIONS


@pytest.mark.parametrize(
    "raw",
    [
        "abc",
        "0",
        "-3",
        "99999",
        "1e3",
        "3.0",
        " ",
        b"\xff\xfe",
        "1" * 400,
        "/slot",
        "0/slot",
        "abc/slot",
        "\u00b2",
        "\u0663/slot",
    ],
)
def test_a_stored_count_that_is_no_whole_number_in_range_is_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="whole number|is not from 1") as e:
        P.stored_layout(raw)
    assert "\n" not in str(e.value) and len(str(e.value)) < 120


@pytest.mark.parametrize("raw", ["12/", "12/slots", "12/slot/x", "3/name", "3/\udcff", "12/" + "x" * 400])
def test_a_stored_naming_this_version_does_not_know_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="no naming this version knows") as e:
        P.stored_layout(raw)
    assert "\n" not in str(e.value) and len(str(e.value)) < 120


def test_a_stored_layout_reads_back() -> None:
    assert P.stored_layout("12/slot") == P.Layout(12, by_slot=True)
    assert P.stored_layout(b"3/slot") == P.Layout(3)
    assert P.stored_layout("12") == P.Layout(12, by_slot=False)  # the first naming
    assert P.stored_layout(str(P.MAX_PARTITIONS)).parts == P.MAX_PARTITIONS
    for layout in (P.Layout(12), P.Layout(12, by_slot=False), P.Layout(5)):
        assert P.stored_layout(layout.stored()) == layout
    # one partition is {JOB} in either naming, and is stored as today: a count alone
    assert P.Layout(1).stored() == "1" and P.Layout(1).keys("books") == ["scale:{books}"]


class Partitions:
    """Queues of records per partition, leased as the store's script would: up to ``want``."""

    def __init__(self, sizes: list[int]) -> None:
        self.left = list(sizes)
        self.calls: list[tuple[int, int]] = []

    def ask(self, part: int, want: int) -> int:
        self.calls.append((part, want))
        got = min(want, self.left[part])
        self.left[part] -= got
        return got


def _lease(plan: P.LeasePlan, parts: Partitions, n: int) -> Counter[int]:
    before = list(parts.left)
    plan.run(n, parts.ask)
    return Counter({i: before[i] - parts.left[i] for i in range(len(before)) if before[i] != parts.left[i]})


def test_a_hot_partition_gets_its_share_of_a_batch_not_all_of_it() -> None:
    parts = Partitions([10_000, 5, 5, 5])
    got = _lease(P.LeasePlan(4), parts, 12)
    assert got == {0: 3, 1: 3, 2: 3, 3: 3}
    # whichever partition the call starts with
    for start in range(4):
        parts = Partitions([5, 5, 10_000, 5])
        assert _lease(P.LeasePlan(4, start), parts, 8) == {0: 2, 1: 2, 2: 2, 3: 2}


def test_what_short_partitions_cannot_give_comes_from_the_others_so_a_batch_is_full() -> None:
    parts = Partitions([0, 1, 10_000, 0])
    got = _lease(P.LeasePlan(4), parts, 64)
    assert sum(got.values()) == 64 and got[1] == 1
    # more than one with more: what is left is split among them again
    parts = Partitions([100, 1, 100, 0])
    got = _lease(P.LeasePlan(4), parts, 40)
    assert got == {0: 20, 1: 1, 2: 19} or got == {0: 19, 1: 1, 2: 20}, got


def test_every_partition_is_served_by_calls_of_one_record_in_turn() -> None:
    """A worker leasing one at a time goes round the partitions with work: no partition
    starves, and an empty one does not make the next serve twice in a row."""
    parts = Partitions([50, 0, 50, 50, 0, 0])
    plan = P.LeasePlan(6)
    served = []
    for _ in range(9):
        got = _lease(plan, parts, 1)
        served += list(got)
    assert served == [0, 2, 3] * 3


def test_nothing_anywhere_costs_one_call_per_partition() -> None:
    parts = Partitions([0, 0, 0])
    assert _lease(P.LeasePlan(3), parts, 10) == Counter()
    assert len(parts.calls) == 3


def test_a_rounds_asks_go_together_and_only_the_short_are_asked_again() -> None:
    """run_batched hands each round's asks over at once (the store sends them in one
    pipeline); the partitions, shares and order are those of one-at-a-time asks."""
    parts = Partitions([100, 1, 100, 0])
    rounds: list[list[tuple[int, int]]] = []

    def ask_all(asks: list[tuple[int, int]]) -> list[int]:
        rounds.append(list(asks))
        return [parts.ask(i, w) for i, w in asks]

    P.LeasePlan(4).run_batched(40, ask_all)
    assert rounds == [[(0, 10), (1, 10), (2, 10), (3, 10)], [(0, 10), (2, 9)]]
    assert parts.left == [80, 0, 81, 0]
    # the same asks as the one-at-a-time run
    one = Partitions([100, 1, 100, 0])
    P.LeasePlan(4).run(40, one.ask)
    assert one.calls == [a for r in rounds for a in r]


@dataclass
class Row:
    priority: int
    domain: str
    error: str | None = None


def test_a_batch_from_several_partitions_is_ordered_as_one_partition_orders_its_own() -> None:
    a = [Row(0, "big"), Row(0, "small1"), Row(0, "big"), Row(0, "big")]
    b = [Row(0, "small2"), Row(0, "small2")]
    got = [(r.priority, r.domain) for r in P.merge([a, b])]
    # every site's first before any site's second
    assert {d for _, d in got[:3]} == {"big", "small1", "small2"}
    assert got[3:] == [(0, "big"), (0, "small2"), (0, "big")] or {d for _, d in got[3:5]} == {"big", "small2"}
    high = P.merge([[Row(0, "a"), Row(5, "a")], [Row(9, "b", error="unreadable"), Row(1, "b")]])
    assert [(r.priority, r.domain, r.error) for r in high] == [
        (5, "a", None),
        (1, "b", None),
        (0, "a", None),
        (9, "b", "unreadable"),  # the records that could not be read come last
    ]
