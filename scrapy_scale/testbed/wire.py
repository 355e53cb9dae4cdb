"""The testbed's wire format: host and egress addresses, HTTP answers and resets."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from collections.abc import Sequence

HOST_NAME = "shop{n}.example.test"
_FIRST_HOST_IP = int(ipaddress.IPv4Address("127.0.0.2"))
_FIRST_EGRESS_IP = int(ipaddress.IPv4Address("127.254.0.1"))

REASONS = {
    200: "OK",
    403: "Forbidden",
    404: "Not Found",
    407: "Proxy Authentication Required",
    410: "Gone",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def host_ip(n: int) -> str:
    """Loopback address of host number n (1-based): 127.0.0.2, 127.0.0.3, ..."""
    return str(ipaddress.IPv4Address(_FIRST_HOST_IP + n - 1))


def egress_ip(i: int) -> str:
    """Source address proxy number i (0-based) connects to targets from: 127.254.0.1, ..."""
    return str(ipaddress.IPv4Address(_FIRST_EGRESS_IP + i))


def http_response(
    status: int,
    body: bytes,
    extra: Sequence[tuple[str, str]] = (),
    close: bool = False,
    head_only: bool = False,
    content_type: str = "text/html; charset=utf-8",
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in extra]
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


#: what a ``reset`` fault sends before the RST: the start of an answer, cut mid-headers
RESET_PREFIX = b"HTTP/1.1 200 OK\r\nContent-Type: text/ht"


def reset_transport(transport: asyncio.BaseTransport) -> None:
    """Close with TCP RST (SO_LINGER 0) instead of FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()  # type: ignore[attr-defined]


def reset_mid_answer(transport: asyncio.BaseTransport) -> None:
    """The first bytes of an answer (:data:`RESET_PREFIX`), then RST: what a ``reset`` fault
    (and a flaky proxy) does.

    A reset before any byte is invisible to Scrapy on a reused keep-alive connection:
    Twisted's connection pool then re-sends an idempotent request once by itself
    (``ResponseNeverReceived``). Once a byte came, the client fails the request
    (``ResponseFailed``) and Scrapy sees it. The bytes are in the client's receive queue
    before the RST (loopback, sent at once), and a reset socket still returns queued data
    before its error."""
    assert isinstance(transport, asyncio.WriteTransport)
    transport.write(RESET_PREFIX)
    reset_transport(transport)
