"""The shared limiter (GCRA in Lua on the Redis clock) and the learned-delay stores, against
the real Redis and a real SQLite file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scrapy_scale.throttle.shared import SqliteShared

pytestmark = pytest.mark.pure


def test_status_names_the_paused_sites_and_until_when(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A site paused by Retry-After was invisible in `scrapy scale status`: the learned state
    the workers save now carries the pause; status reads it back as untrusted input (a time
    that is not a number is skipped, one beyond SCALE_RETRY_AFTER_MAX is clamped, one warning)."""
    import logging

    from scrapy.settings import Settings

    from scrapy_scale.clock import FakeClock
    from scrapy_scale.throttle import status
    from scrapy_scale.throttle.pacing import Pacing
    from scrapy_scale.throttle.profiles import Profiles

    clk = FakeClock(time.time())
    pacing = Pacing(Profiles.parse(None), clk)
    pacing.on_rate_limited("shop1.test", 0.1, 30.0)  # Retry-After: 30
    pacing.on_success("shop2.test", 0.1)
    exported = pacing.export()
    assert exported["shop1.test"]["paused_until"] == clk.now + 30
    db = tmp_path / "throttle.db"
    shared = SqliteShared(str(db), "job")
    shared.save(exported)
    # garbage another process (or a bad disk) left behind
    shared.save({"nan.test": {"delay": 1.0, "at": 1.0, "paused_until": float("nan")}})
    shared.save({"far.test": {"delay": 1.0, "at": 1.0, "paused_until": clk.now + 1e9}})
    shared.save({"huge.test": {"delay": 1.0, "at": 1.0, "paused_until": 10**400}})  # float() overflows
    shared.close()
    rows = status.read(Settings({"SCALE_THROTTLE_URL": f"sqlite:///{db}"}), "job")
    reader = status.PausedSites(3600.0)
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.throttle.status"):
        paused = reader.at(rows, clk.now)
        reader.at(rows, clk.now)  # read again (watch): no second warning
    assert [(p["site"], p["until"], p["clamped"]) for p in paused] == [
        ("shop1.test", clk.now + 30, False),
        ("far.test", clk.now + 3600, True),
    ]
    assert len(caplog.records) == 3, caplog.text  # one per bad site, once
    assert "huge.test has an unreadable pause time" in caplog.text
    assert reader.warned == {"nan.test", "huge.test", "far.test"}
    text = status.format_paused(paused, clk.now)
    assert text.startswith("paused sites (Retry-After): shop1.test until ") and "(in 30 s)" in text, text
    assert reader.at(rows, clk.now + 31)[0]["site"] == "far.test"


def test_each_status_reader_warns_once_of_its_own(caplog: pytest.LogCaptureFixture) -> None:
    """The warn-once state was the module's: a second `status` in one process (a test run
    twice, a tool calling it again) said nothing about a bad pause time. Each reader (one
    `status`, one `watch`) now warns once per site."""
    import logging

    from scrapy_scale.throttle import status

    rows = [{"site": "nan.test", "delay": 1.0, "learned_at": 1.0, "paused_until": float("nan")}]
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.throttle.status"):
        for _ in range(2):
            reader = status.PausedSites()
            assert reader.at(rows, 1000.0) == [] and reader.at(rows, 1000.0) == []
    assert [r.getMessage() for r in caplog.records] == [
        "throttle: nan.test has an unreadable pause time nan in the shared state; ignored"
    ] * 2


#: a learned-pacing record as the version before the typed record (LearnedRecord) wrote it
OLD_LEARNED = (
    '{"delay": 0.8, "too_fast": 0.5, "too_fast_at": 990.0, "proven": 0.6, "settled": 0.0, "fastest_ok": 0.7, '
    '"paces": {"3": [12.0, 0.0], "5": [4.0, 2.0]}, "at": 995.0, "paused_until": 0.0}'
)


def test_a_learned_record_in_the_previous_written_form_reads_back_the_same() -> None:
    """The typed record changes no stored byte: a record written by the previous version is
    decoded by the one decoder, adopted, and written back with the same fields."""
    import json

    from scrapy_scale.clock import FakeClock
    from scrapy_scale.throttle.learned import check_learned
    from scrapy_scale.throttle.pacing import Pacing
    from scrapy_scale.throttle.profiles import Profiles

    old = json.loads(OLD_LEARNED)
    state, why = check_learned(old, 1000.0)
    assert why is None and state is not None
    assert {k: v for k, v in state.items() if k != "paces"} == {k: v for k, v in old.items() if k != "paces"}
    assert state["paces"] == {int(b): c for b, c in old["paces"].items()}
    pc = Pacing(Profiles.parse({}), FakeClock(1000.0))
    assert pc.restore({"shop.test": old}) == 1
    assert json.loads(json.dumps(pc.export()["shop.test"])) == old
