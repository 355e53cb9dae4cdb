"""What the testbed's servers share with the Testbed that runs them: the connections they
hold open (aborted when the testbed stops), the count of target connections accepted,
and what the target hosts' and the proxies' protocols may ask of the Testbed.

Its own module so that the protocols (:mod:`.target`, :mod:`.proxy`) and the Testbed
(:mod:`.server`) read one public interface instead of importing each other.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Protocol

from scrapy_scale.testbed.answers import Answer
from scrapy_scale.testbed.log import ProxyEvent


class OpenConnections:
    """The target hosts' transports and the proxies' streams open now, and how many
    connections the target hosts accepted. Used on the testbed's event loop only."""

    def __init__(self) -> None:
        self._transports: set[asyncio.BaseTransport] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0

    def target_opened(self, transport: asyncio.BaseTransport) -> int:
        """Track a target host's new connection; its number (1, 2, ...)."""
        self._transports.add(transport)
        self.accepted += 1
        return self.accepted

    def target_closed(self, transport: asyncio.BaseTransport) -> None:
        self._transports.discard(transport)

    def stream_opened(self, writer: asyncio.StreamWriter) -> None:
        """Track a proxy's stream (a client's or the one to a target)."""
        self._writers.add(writer)

    def stream_closed(self, writer: asyncio.StreamWriter) -> None:
        self._writers.discard(writer)

    def abort_all(self) -> None:
        """Abort every connection open now (the testbed is stopping)."""
        for t in list(self._transports):
            t.abort()  # type: ignore[attr-defined]
        for w in list(self._writers):
            w.transport.abort()


class Gate:
    """The target hosts' answers held back while the gate is shut (a test's moment: "nothing
    answers until every worker has joined"), sent when it opens. Used on the testbed's loop."""

    def __init__(self) -> None:
        self.shut = False
        self._held: list[Callable[[], None]] = []
        #: answers that waited at the gate
        self.held_count = 0

    def hold(self, send: Callable[[], None]) -> None:
        self._held.append(send)
        self.held_count += 1

    def open(self) -> None:
        self.shut = False
        held, self._held = self._held, []
        for send in held:
            send()

    def open_from(self, loop: asyncio.AbstractEventLoop) -> int:
        """:meth:`open` on ``loop`` from another thread, once it ran; the answers held."""
        done = threading.Event()

        def open_now() -> None:
            self.open()
            done.set()

        loop.call_soon_threadsafe(open_now)
        done.wait(10)
        return self.held_count


class TargetHost(Protocol):
    """What a target host's protocol asks of the Testbed."""

    open_connections: OpenConnections
    gate: Gate
    egress_by_ip: dict[str, str]

    def answer(self, host_no: int, target: str, egress: str | None, client: str, conn: int, method: str) -> Answer: ...


class ProxyHost(Protocol):
    """What a proxy asks of the Testbed."""

    open_connections: OpenConnections
    addresses: dict[str, str]
    seed: int

    def log_proxy_event(self, event: ProxyEvent) -> None: ...
