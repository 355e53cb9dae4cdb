"""Browser contexts of egresses: an attempt is released once, however many copies of its
request say so (a retry is a copy of the failed attempt's request)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from scrapy import Request

from scrapy_scale.egress.browser import CONTEXT, BrowserContexts
from scrapy_scale.egress.identity import Egress

pytestmark = pytest.mark.pure


class FakeHandler:
    """The parts of scrapy-playwright's handler the pool uses: context_wrappers, its
    launch lock and _create_browser_context (tests/unit/test_compat_signatures.py pins them)."""

    def __init__(self) -> None:
        self.context_wrappers: dict[str, SimpleNamespace] = {}
        self.context_launch_lock = asyncio.Lock()
        self.closed: list[str] = []

    async def _create_browser_context(self, name: str, context_kwargs: dict, spider: object = None) -> None:
        handler = self

        class Ctx:
            async def close(self) -> None:
                handler.closed.append(name)
                handler.context_wrappers.pop(name, None)

        self.context_wrappers[name] = SimpleNamespace(context=Ctx())


class Contexts(BrowserContexts):
    def __init__(self, handler: FakeHandler):
        super().__init__(crawler=None, pages=0, age=0, clock=lambda: 0.0)
        self.fake = handler

    def _handler(self, scheme: str) -> FakeHandler:
        self.handlers.setdefault(id(self.fake), self.fake)
        return self.fake


def test_a_retry_copy_does_not_release_its_attempt_twice():
    async def run() -> tuple[FakeHandler, Contexts, list[str]]:
        h = FakeHandler()
        contexts = Contexts(h)
        e = Egress("127.0.0.1:9", "http://127.0.0.1:9")
        a = Request("http://shop.test/a", meta={"playwright": True})
        b = Request("http://shop.test/b", meta={"playwright": True})
        await contexts.assign(a, e, None)
        await contexts.assign(b, e, None)
        name = a.meta["playwright_context"]
        assert b.meta["playwright_context"] == name and name in h.context_wrappers
        contexts.evicted(e.id)  # the egress was quarantined: its context closes after its pages
        retry = a.copy()  # the outcome middleware builds the retry before it sends the outcome
        contexts.release(a.meta.pop(CONTEXT, None))  # the attempt's outcome
        contexts.release(retry.meta.pop(CONTEXT, None))  # the retry goes back to the scheduler
        await asyncio.sleep(0)
        open_while_b_runs = list(h.context_wrappers)
        contexts.release(b.meta.pop(CONTEXT, None))
        await asyncio.sleep(0)
        return h, contexts, open_while_b_runs

    h, contexts, open_while_b_runs = asyncio.run(run())
    name = "egress:127.0.0.1:9:1"
    assert open_while_b_runs == [name]  # b's page still uses it: not closed under it
    assert h.closed == [name]  # closed once b was done (the close path ran)
    assert contexts.assigned == {}


def test_release_ignores_what_is_not_a_live_token():
    contexts = Contexts(FakeHandler())
    for junk in (None, "egress:x:1", True, 7, 1.5):
        contexts.release(junk)
    assert contexts.assigned == {}
