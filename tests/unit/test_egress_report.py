"""`scrapy scale egress`'s rows and text (scrapy_scale/egress/report.py) from a pool's
state as a crawl stores it: what a reader of the table sees."""

from __future__ import annotations

import pytest

from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.egress.health import Health, HealthPolicy
from scrapy_scale.egress.identity import parse_egresses
from scrapy_scale.egress.pool import EgressPool, PoolOptions
from scrapy_scale.egress.report import describe, format_rows

pytestmark = pytest.mark.pure

POLICY = HealthPolicy(min_failures=3, threshold=0.5, half_life=60, base=10, max_quarantine=80, probes=1)
A, B = "http://127.0.0.1:8001", "http://127.0.0.1:8002"
IA, IB = "127.0.0.1:8001", "127.0.0.1:8002"


def stored_state(p: EgressPool) -> dict:
    """The state `scrapy scale egress` reads back, as the crawl writes it."""
    return {
        "health": {k: h.to_record() for k, h in p.health.items()},
        "counts": {"w1": p.counters()},
        "pool": {e: {"group": g} for e, g in p.members.items()},
    }


def test_a_dead_proxy_shows_its_score_at_the_quarantine_and_a_parser_fault_is_not_the_proxys() -> None:
    """Issue 31: a dead proxy read `score 1.00` (its counts start over at the quarantine),
    and a healthy proxy listed `parse_failed 60` among its failures."""
    clock = FakeClock(1000.0)
    p = EgressPool(parse_egresses([A, B]), POLICY, PoolOptions(), clock, Randomness(1))
    for _ in range(3):
        p.observe(IA, "shop.test", "egress_failed", "egress", responded=False)
    for _ in range(60):
        p.observe(IB, "shop.test", "parse_failed", "none", responded=True)
    p.observe(IB, "shop.test", "ok", "none", responded=True)
    rows = {r["egress"]: r for r in describe(stored_state(p), now=clock())}
    assert rows[IA]["state"] == "quarantined" and rows[IA]["score"] == 0.25  # (0 + 1) / (0 + 3 + 1)
    assert rows[IA]["failures"] == {"egress_failed": 3}
    assert rows[IB]["failures"] == {} and rows[IB]["other_outcomes"] == {"parse_failed": 60}
    assert rows[IB]["score"] == 1.0
    text = format_rows(list(rows.values()), now=clock())
    assert f"{IA}: quarantined, until " in text and "score 0.25 when quarantined" in text
    assert f"{IB}: healthy, score 1.00, 0 request(s), no failures; not its fault: parse_failed 60" in text


def test_a_quarantine_stored_before_its_score_was_kept_shows_no_score_and_a_bad_one_is_dropped() -> None:
    rec = Health(until=2000.0, level=1).to_record()
    assert "s" not in rec
    row = describe({"health": {IA: rec}}, now=1000.0)[0]
    assert row["state"] == "quarantined" and row["score"] is None
    assert "score -," in format_rows([row], now=1000.0)
    for bad in (float("nan"), 7.0, "x", True):
        assert Health.from_record(dict(rec, s=bad)).evicted_score is None
        # shared state is untrusted: a bad score is dropped with a note, the record still counts
        problems: list[str] = []
        (row,) = describe({"health": {IA: dict(rec, s=bad)}}, now=1000.0, problems=problems)
        assert row["state"] == "quarantined" and row["score"] is None
        assert len(problems) == 1 and "its score at the quarantine" in problems[0], problems
        p = EgressPool(parse_egresses([A]), POLICY, PoolOptions(), FakeClock(1000.0), Randomness(1))
        events = p.merge({IA: dict(rec, s=bad, c=999.0, u=1050.0)})
        assert [e.kind for e in events if e.kind == "bad_score"] == ["bad_score"], events
        assert p.health[IA].until == 1050.0  # the quarantine itself was taken


def test_a_route_at_its_cap_says_what_that_means() -> None:
    text = format_rows(
        [
            {
                "egress": IA,
                "group": None,
                "in_pool": True,
                "state": "healthy",
                "score": 1.0,
                "requests": 120,
                "failures": {},
                "until": None,
                "banned_for": [],
                "routes_at_cap": [{"domain": "shop1.test", "capped": 6, "sent": 120}],
            }
        ],
        now=0.0,
    )
    assert (
        "route to shop1.test: 120 sent; 6 time(s) a request found it at its cap (SCALE_EGRESS_ROUTE_RATE, "
        "or the pace the site set for it) and took another egress or waited: more egresses would help"
    ) in text


#: health records as the version before the typed record (HealthRecord) wrote them to Redis
#: and egress.db: a quarantined egress (with its score at the quarantine) and a healthy one
OLD_RECORDS = {
    IA: '{"g": 0.0, "b": 0.0, "at": 1000.0, "u": 1030.0, "l": 2, "c": 1000.0, "r": 900.0, "s": 0.25}',
    IB: '{"g": 4.5, "b": 0.5, "at": 990.0, "u": 0.0, "l": 0, "c": 0.0, "r": 0.0}',
}


def test_health_records_in_the_previous_written_form_read_back_the_same() -> None:
    """The typed record changes no stored byte: each old record decodes to the state it
    says and encodes back to the same JSON fields, and `scrapy scale egress` shows it."""
    import json

    for text in OLD_RECORDS.values():
        old = json.loads(text)
        assert Health.from_record(old, 1000.0).to_record() == old
    rows = {r["egress"]: r for r in describe({"health": {k: json.loads(v) for k, v in OLD_RECORDS.items()}}, 1000.0)}
    a = rows[IA]
    assert (a["state"], a["score"], a["until"], a["level"]) == ("quarantined", 0.25, 1030.0, 2)
    b = rows[IB]
    # a healthy egress is shown with the score of its stored counts: (good + 1) / (good + bad + 1)
    assert (b["state"], b["score"], b["until"], b["level"]) == ("healthy", round(5.5 / 6.0, 3), None, 0)
    assert rows[IA]["banned_for"] == [] and rows[IB]["banned_for"] == []
