"""HTTP forward proxies (absolute-URI requests and CONNECT) acting as egresses.

Each proxy connects to targets from its own loopback source address, so a target
sees which egress a request came through (``Served.egress``), for plain requests
and CONNECT tunnels alike. Modes: healthy, slow (``delay`` before each request),
jitter (``p`` of the requests wait a random 0-``delay`` s before they are forwarded,
decided per request ordinal and seed: a path whose send time varies),
flaky (resets ``p`` of the requests), auth (407 without the right
Proxy-Authorization), blackhole (reads the request, never answers, never closes),
garbage (answers with bytes that are not HTTP, then closes), midclose (forwards, sends
the status line, the headers and part of the body, then closes), trickle (sends the
status line and the headers at once, then the body in 8 pieces over ``delay`` seconds);
dead proxies are handled in the server (bound, not listening).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import time
from urllib.parse import urlsplit

from scrapy_scale.testbed.catalog import unit
from scrapy_scale.testbed.faults import ProxySpec
from scrapy_scale.testbed.hosting import ProxyHost
from scrapy_scale.testbed.log import ProxyEvent
from scrapy_scale.testbed.wire import http_response, reset_mid_answer

_HOP = {"proxy-authorization", "proxy-connection", "connection", "keep-alive"}

#: what a ``garbage`` proxy answers: no status line, no headers
GARBAGE = b"\x00\x17\x9cgarbage, not HTTP\n\xff\xfe" * 4


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Read and drop whatever the client sends until it closes (or the testbed stops)."""
    while await reader.read(65536):
        pass


async def start_proxy(tb: ProxyHost, spec: ProxySpec, source_ip: str, port: int = 0) -> asyncio.Server:
    proxy = _Proxy(tb, spec, source_ip)
    return await asyncio.start_server(proxy.handle, host="127.0.0.1", port=port, backlog=1024, reuse_address=True)


class _Proxy:
    def __init__(self, tb: ProxyHost, spec: ProxySpec, source_ip: str):
        self.tb = tb
        self.spec = spec
        self.source_ip = source_ip
        self.count = 0
        want = f"{spec.user}:{spec.password}".encode()
        self.auth = "Basic " + base64.b64encode(want).decode()

    def _event(self, method: str, target: str, client: str, outcome: str) -> None:
        self.tb.log_proxy_event(ProxyEvent(time.time(), self.spec.id, method, target, client, outcome))

    def _resolve(self, host: str) -> str | None:
        host = host.lower()
        if host in self.tb.addresses:
            return self.tb.addresses[host]
        try:
            ip = ipaddress.IPv4Address(host)
        except ValueError:
            return None
        return str(ip) if ip.is_loopback else None  # nothing ever leaves loopback

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tb.open_connections.stream_opened(writer)
        peer = writer.get_extra_info("peername")
        client = peer[0] if peer else "?"
        upstreams: dict[tuple[str, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, _version = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers: list[tuple[str, str]] = []
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers.append((k.strip(), v.strip()))
                hmap = {k.lower(): v for k, v in headers}
                body = b""
                length = int(hmap.get("content-length", "0") or 0)
                if length:
                    body = await reader.readexactly(length)
                self.count += 1
                spec = self.spec
                if spec.mode == "auth" and hmap.get("proxy-authorization") != self.auth:
                    self._event(method, target, client, "auth_required")
                    writer.write(
                        http_response(
                            407, b"proxy authentication required", [("Proxy-Authenticate", 'Basic realm="testbed"')]
                        )
                    )
                    await writer.drain()
                    continue
                if spec.mode == "flaky" and unit(self.tb.seed, "proxy", spec.id, self.count) < spec.p:
                    self._event(method, target, client, "reset")
                    reset_mid_answer(writer.transport)
                    return
                if spec.mode == "slow":
                    await asyncio.sleep(spec.delay)
                if spec.mode == "jitter" and unit(self.tb.seed, "jitter", spec.id, self.count) < spec.p:
                    self._event(method, target, client, "held")  # at receipt; "forwarded" follows
                    await asyncio.sleep(spec.delay * unit(self.tb.seed, "jitter-wait", spec.id, self.count))
                if spec.mode == "blackhole":
                    self._event(method, target, client, "blackhole")
                    await _until_closed(reader)
                    return
                if spec.mode == "garbage":
                    self._event(method, target, client, "garbage")
                    writer.write(GARBAGE)
                    await writer.drain()
                    return
                if spec.mode == "midclose" and method == "CONNECT":
                    # a tunnel's answer is opaque (TLS): the proxy closes before it
                    self._event(method, target, client, "midclose")
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await writer.drain()
                    await reader.read(65536)
                    return
                if method == "CONNECT":
                    await self._tunnel(target, reader, writer, client)
                    return
                u = urlsplit(target)
                ip = self._resolve(u.hostname or "")
                if u.scheme != "http" or ip is None:  # https goes through CONNECT
                    self._event(method, target, client, "bad_gateway")
                    writer.write(http_response(502, b"bad gateway"))
                    await writer.drain()
                    continue
                port = u.port or 80
                key = (ip, port)
                up = upstreams.get(key)
                if up is None or up[1].is_closing() or up[0].at_eof():
                    try:
                        up = await asyncio.open_connection(ip, port, local_addr=(self.source_ip, 0))
                    except OSError:
                        self._event(method, target, client, "bad_gateway")
                        writer.write(http_response(502, b"bad gateway"))
                        await writer.drain()
                        continue
                    upstreams[key] = up
                self._event(method, target, client, "midclose" if spec.mode == "midclose" else "forwarded")
                path = (u.path or "/") + (f"?{u.query}" if u.query else "")
                out = [f"{method} {path} HTTP/1.1"]
                out += [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP]
                up[1].write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
                try:
                    rhead = await up[0].readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    # the target reset or closed: the client sees the same
                    reset_mid_answer(writer.transport)
                    return
                rmap = {}
                for line in rhead.decode("latin-1").split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    rmap[k.strip().lower()] = v.strip()
                if "content-length" in rmap:
                    rbody = await up[0].readexactly(int(rmap["content-length"])) if method != "HEAD" else b""
                    if spec.mode == "midclose":
                        writer.write(rhead + rbody[: len(rbody) // 2])
                        await writer.drain()
                        return
                    if spec.mode == "trickle":
                        await _trickle(writer, rhead, rbody, spec.delay)
                    else:
                        writer.write(rhead + rbody)
                        await writer.drain()
                    if rmap.get("connection", "").lower() == "close":
                        up[1].close()
                        upstreams.pop(key, None)
                    if hmap.get("connection", "").lower() == "close":
                        return
                else:
                    rest = await up[0].read()
                    writer.write(rhead + (rest[: len(rest) // 2] if spec.mode == "midclose" else rest))
                    await writer.drain()
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return  # CancelledError: the testbed is stopping
        finally:
            self.tb.open_connections.stream_closed(writer)
            for _r, w in upstreams.values():
                w.close()
            if not writer.is_closing():
                writer.close()

    async def _tunnel(
        self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str
    ) -> None:
        host, _, port_s = target.rpartition(":")
        ip = self._resolve(host.strip("[]"))
        if ip is None or not port_s.isdigit():
            self._event("CONNECT", target, client, "bad_gateway")
            writer.write(http_response(502, b"bad gateway", close=True))
            await writer.drain()
            return
        try:
            ur, uw = await asyncio.open_connection(ip, int(port_s), local_addr=(self.source_ip, 0))
        except OSError:
            self._event("CONNECT", target, client, "bad_gateway")
            writer.write(http_response(502, b"bad gateway", close=True))
            await writer.drain()
            return
        self._event("CONNECT", target, client, "tunnel")
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        self.tb.open_connections.stream_opened(uw)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass
            finally:
                if not dst.is_closing():
                    dst.close()

        try:
            await asyncio.gather(pipe(reader, uw), pipe(ur, writer))
        finally:
            self.tb.open_connections.stream_closed(uw)


#: the pieces a trickling proxy sends a body in
TRICKLE_PIECES = 8


async def _trickle(writer: asyncio.StreamWriter, head: bytes, body: bytes, seconds: float) -> None:
    """The head at once, then the body in TRICKLE_PIECES pieces over ``seconds``."""
    writer.write(head)
    await writer.drain()
    step = max(1, -(-len(body) // TRICKLE_PIECES))
    for i in range(0, len(body), step):
        await asyncio.sleep(seconds / TRICKLE_PIECES)
        writer.write(body[i : i + step])
        await writer.drain()
