"""OutcomeBus sends as Scrapy's send_catch_log does: the same keyword arguments to the same
receivers, errors logged and the others still called, receivers connected or gone mid-crawl
seen at the next send; and it inspects the receivers only when they changed."""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest
from scrapy.signalmanager import SignalManager

from scrapy_scale.outcomes.bus import OutcomeBus

pytestmark = pytest.mark.pure


class Recorder:
    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []

    def only_outcome(self, outcome: Any) -> None:
        self.got.append({"outcome": outcome})

    def three(self, outcome: Any, request: Any, spider: Any) -> None:
        self.got.append({"outcome": outcome, "request": request, "spider": spider})

    def kwargs(self, outcome: Any, **kw: Any) -> None:
        self.got.append({"outcome": outcome, **kw})

    def some(self, request: Any, sender: Any = None) -> None:
        self.got.append({"request": request, "sender": sender})


def make() -> tuple[object, SignalManager]:
    return object(), SignalManager(object())


def test_receivers_get_what_send_catch_log_gives_them() -> None:
    sig, sm = make()
    recs = [Recorder() for _ in range(4)]
    sm.connect(recs[0].only_outcome, signal=sig)
    sm.connect(recs[1].three, signal=sig)
    sm.connect(recs[2].kwargs, signal=sig)
    sm.connect(recs[3].some, signal=sig)
    plain: list[dict[str, Any]] = []
    sm.connect(lambda outcome, request: plain.append({"outcome": outcome, "request": request}), signal=sig, weak=False)

    sm.send_catch_log(sig, outcome=1, request=2, spider=3)
    bus = OutcomeBus(sig, sm.sender)
    bus.send(outcome=1, request=2, spider=3)
    for r in recs:
        assert len(r.got) == 2 and r.got[0] == r.got[1], r.got
    assert plain == [{"outcome": 1, "request": 2}] * 2
    assert recs[2].got[1] == {"outcome": 1, "request": 2, "spider": 3, "signal": sig, "sender": sm.sender}
    assert recs[3].got[1] == {"request": 2, "sender": sm.sender}


def test_inspects_only_when_the_receivers_change() -> None:
    sig, sm = make()
    a, b = Recorder(), Recorder()
    sm.connect(a.three, signal=sig)
    bus = OutcomeBus(sig, sm.sender)
    for i in range(5):
        bus.send(outcome=i, request=None, spider=None)
    assert bus.rebuilds == 1 and len(a.got) == 5  # the cached receivers were used four times
    sm.connect(b.only_outcome, signal=sig)  # connected mid-crawl: seen at the next send
    bus.send(outcome=5, request=None, spider=None)
    assert bus.rebuilds == 2 and b.got == [{"outcome": 5}]
    sm.disconnect(a.three, signal=sig)
    bus.send(outcome=6, request=None, spider=None)
    assert bus.rebuilds == 3 and len(a.got) == 6 and len(b.got) == 2
    del b
    gc.collect()  # a receiver that is gone is not called (its weak reference is dead)
    bus.send(outcome=7, request=None, spider=None)
    assert len(a.got) == 6


def test_a_receiver_that_raises_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    sig, sm = make()
    after = Recorder()

    def broken(outcome: Any) -> None:
        raise RuntimeError("boom")

    sm.connect(broken, signal=sig, weak=False)
    sm.connect(after.only_outcome, signal=sig)
    bus = OutcomeBus(sig, sm.sender)
    with caplog.at_level(logging.ERROR):
        bus.send(outcome=1, request=None, spider=None)
    assert after.got == [{"outcome": 1}]
    errors = [r for r in caplog.records if "Error caught on signal handler" in r.getMessage()]
    assert len(errors) == 1 and errors[0].exc_info and "boom" in str(errors[0].exc_info[1])


def test_receivers_of_any_signal_and_of_any_sender_are_called_once() -> None:
    from pydispatch import dispatcher

    sig, sm = make()
    rec = Recorder()
    sm.connect(rec.kwargs, signal=dispatcher.Any)  # every signal of this sender
    sm.connect(rec.kwargs, signal=sig)  # and this one: still one call per send
    bus = OutcomeBus(sig, sm.sender)
    bus.send(outcome=1, request=None, spider=None)
    assert [g["outcome"] for g in rec.got] == [1]
    sm.disconnect_all(sig)
    sm.disconnect(rec.kwargs, signal=dispatcher.Any)
