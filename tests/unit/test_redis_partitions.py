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
    assert P.key_of("books", 0) == "scale:{books}"
    tags = {P.key_of("books", i).split("{", 1)[1].split("}", 1)[0] for i in range(12)}
    assert len(tags) == 12  # 12 hash tags: 12 slots
    # no job's partition is another job's key: '/' is never in a job name
    assert P.key_of("books", 1) == "scale:{books/p1}"


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


@pytest.mark.parametrize("raw", ["abc", "0", "-3", "99999", "1e3", "3.0", " ", b"\xff\xfe", "1" * 400])
def test_a_stored_count_that_is_no_whole_number_in_range_is_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="whole number|is not from 1") as e:
        P.stored_parts(raw)
    assert "\n" not in str(e.value) and len(str(e.value)) < 120


def test_a_stored_count_reads_back() -> None:
    assert P.stored_parts("12") == 12
    assert P.stored_parts(b"3") == 3
    assert P.stored_parts(str(P.MAX_PARTITIONS)) == P.MAX_PARTITIONS


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
