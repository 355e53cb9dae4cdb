"""The target hosts' HTTP/1.1 server protocol (keep-alive, one request at a time per connection)."""

from __future__ import annotations

import asyncio
import functools
from urllib.parse import urlsplit

from scrapy_scale.testbed.hosting import TargetHost
from scrapy_scale.testbed.wire import http_response, reset_mid_answer, reset_transport


class TargetProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, one request at a time per connection (pipelining queues)."""

    def __init__(self, tb: TargetHost, host_no: int):
        self.tb = tb
        self.host_no = host_no
        self.buf = b""
        self.busy = False
        self.closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if peer else "?"
        self.egress = self.tb.egress_by_ip.get(self.client)
        self.conn = self.tb.open_connections.target_opened(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.transport is not None:
            self.tb.open_connections.target_closed(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > 1 << 20:
            reset_transport(self.transport)  # type: ignore[arg-type]
            return
        self._process()

    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self._write(http_response(400, b"bad request", close=True), close=True)
                return
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if target.startswith(("http://", "https://")):
                u = urlsplit(target)
                target = (u.path or "/") + (f"?{u.query}" if u.query else "")
            conn_hdr = headers.get("connection", "").lower()
            close = conn_hdr == "close" or (version == "HTTP/1.0" and conn_hdr != "keep-alive")
            ans = self.tb.answer(self.host_no, target, self.egress, self.client, self.conn, method)
            if ans.kind == "reset":
                self.closed = True
                assert self.transport is not None
                reset_mid_answer(self.transport)
                return
            if ans.kind == "hang":
                self.busy = True
                return
            assert ans.status is not None
            data = http_response(
                ans.status,
                ans.body,
                ans.headers,
                close,
                method == "HEAD",
                "text/plain" if target == "/robots.txt" else "text/html; charset=utf-8",
            )
            if self.tb.gate.shut:
                self.busy = True
                self.tb.gate.hold(functools.partial(self._send_later, data, close))
                return
            if ans.delay > 0:
                self.busy = True
                loop = asyncio.get_running_loop()
                loop.call_later(ans.delay, self._send_later, data, close)
                return
            self._write(data, close)

    def _send_later(self, data: bytes, close: bool) -> None:
        self.busy = False
        if self.closed:
            return
        self._write(data, close)
        self._process()

    def _write(self, data: bytes, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if close:
            self.closed = True
            self.transport.close()
