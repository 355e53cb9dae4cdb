"""The probe's load generator: keeps exactly N requests in flight to one site (aiohttp).

Thin glue: it runs a step the policy chose and hands back its answers. Why not Scrapy's
downloader: a step needs exactly N requests in flight, a new N each step, a stop within
one answer of a 429, and a rate ceiling; Scrapy's scheduler, slots, retries and pacing
(ours included) would each add their own waiting, and the probe would measure them
instead of the site. aiohttp is already installed with Scrapy; answers still go through
the same classifier a crawl uses (``scrapy_scale.outcomes.classify``), on Scrapy
``Request``/``Response`` objects built from them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from scrapy.exceptions import (
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from scrapy.http import Headers, Request
from scrapy.responsetypes import responsetypes

from scrapy_scale.outcomes.classify import Classifier
from scrapy_scale.probe.figures import Answer, StepFigures, percentile, refusal, summarise
from scrapy_scale.probe.policy import Limits, step_done


class MapResolver(AbstractResolver):
    """Names in ``names`` (e.g. ``TESTBED_HOSTS``) resolve to their address; others by DNS."""

    def __init__(self, names: Mapping[str, str]):
        self.names = dict(names)
        self.default = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        ip = self.names.get(host)
        if ip is None:
            return await self.default.resolve(host, port, family)
        return [ResolveResult(hostname=host, host=ip, port=port, family=socket.AF_INET, proto=0, flags=0)]

    async def close(self) -> None:
        await self.default.close()


def session(names: Mapping[str, str], timeout: float, user_agent: str) -> aiohttp.ClientSession:
    conn = aiohttp.TCPConnector(limit=0, resolver=MapResolver(names), ssl=False)
    return aiohttp.ClientSession(
        connector=conn,
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"User-Agent": user_agent},
        auto_decompress=True,
        cookie_jar=aiohttp.DummyCookieJar(),  # each request as a first visit: no session carried
    )


def _scrapy_exception(e: BaseException) -> BaseException:
    """An aiohttp/asyncio error as the Scrapy download error the classifier knows."""
    if isinstance(e, asyncio.TimeoutError | TimeoutError):
        return DownloadTimeoutError(str(e))
    if isinstance(e, aiohttp.ClientConnectorError) and isinstance(e.os_error, ConnectionRefusedError):
        return DownloadConnectionRefusedError(str(e))
    if isinstance(e, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return ResponseDataLossError(str(e))
    return DownloadFailedError(str(e))


def classify(
    classifier: Classifier, url: str, status: int, headers: Any, body: bytes
) -> tuple[str, float | None, bool]:
    """(failure class, Retry-After seconds or None, Retry-After header present)."""
    h = Headers()
    for k, v in headers.items():
        h.appendlist(k, v)
    request = Request(url)
    rcls = responsetypes.from_args(headers=h, url=url, body=body[:5000])
    response = rcls(url=url, status=status, headers=h, body=body, request=request)
    v = classifier.classify_response(response, request)
    return str(v.cls), v.retry_after, b"Retry-After" in h


def _run_time() -> float:
    """Seconds this process ran or waited for a CPU (Linux), else its CPU time."""
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat") as f:
            on_cpu, waiting, _ = f.read().split()
        return (int(on_cpu) + int(waiting)) / 1e9
    except (OSError, ValueError):
        return time.process_time()


@dataclass
class _Step:
    answers: list[Answer] = field(default_factory=list)
    sent: int = 0
    in_flight: int = 0
    area: float = 0.0  # integral of in_flight over time
    last: float = 0.0
    retry_after: float = 0.0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    #: (when, area) at the send that spent the step's request budget: from then on the
    #: probe sends no more and its requests in flight drain, its own doing, not the site's
    full: tuple[float, float] | None = None

    def change(self, now: float, delta: int) -> None:
        self.area += self.in_flight * (now - self.last)
        self.last = now
        self.in_flight += delta


async def run_step(
    sess: aiohttp.ClientSession,
    urls: Sequence[str],
    concurrency: int,
    phase: str,
    max_rate: float | None,
    lim: Limits,
    classifier: Classifier,
    request_budget: int,
    stagger: float = 0.0,
    now: Callable[[], float] = time.monotonic,
    deadline: float | None = None,
) -> StepFigures:
    """Run one step: ``concurrency`` requests in flight (at most ``max_rate``/s), held as
    the policy says, stopped at once on a refusal (a 429, a 503 with Retry-After); its figures. The workers'
    first requests are spread over ``stagger`` seconds (a latency of the site), as they
    are in a steady state, instead of all at once: a burst of N at the step's start would
    meet a site's burst limit, which a crawl at that concurrency never does. At
    ``deadline`` (on the ``now`` clock: the probe's max time) the step ends, its requests
    in flight cancelled."""
    t0 = now()
    st = _Step(last=t0)
    spacing = 1.0 / max_rate if max_rate else 0.0
    slots = [t0]  # next send time under the rate ceiling
    order = [0]

    async def worker(i: int) -> None:
        if stagger > 0 and i:
            await asyncio.sleep(stagger * i / concurrency)
        while not st.stop.is_set() and st.sent < request_budget:
            if spacing:
                t = max(slots[0], now())
                slots[0] = t + spacing
                if t > now():
                    await asyncio.sleep(t - now())
                if st.stop.is_set() or st.sent >= request_budget:
                    return
            url = urls[order[0] % len(urls)]
            order[0] += 1
            st.sent += 1
            sent = now()
            st.change(sent, +1)
            if st.sent >= request_budget:
                st.full = (sent, st.area)
            status: int | None = None
            ra: float | None = None
            has_ra = False
            try:
                async with sess.get(url, allow_redirects=False) as r:
                    body = await r.read()
                    status = r.status
                    cls, ra, has_ra = classify(classifier, url, r.status, r.headers, body)
            except asyncio.CancelledError:
                st.change(now(), -1)
                raise
            except Exception as e:  # noqa: BLE001 - every failure is an answer, classified
                cls = str(classifier.classify_exception(_scrapy_exception(e), Request(url)).cls)
            done = now()
            st.change(done, -1)
            st.answers.append(Answer(sent, done, cls, status, has_ra))
            if refusal(cls, status, has_ra):
                st.retry_after = max(st.retry_after, ra or 0.0)
                st.stop.set()  # at once: the site said so

    lags: list[tuple[float, float]] = []  # (when, how late) of a 10 ms timer: the loop's own delay

    async def ticker() -> None:
        while True:
            t = now()
            await asyncio.sleep(0.01)
            lags.append((t, max(0.0, now() - t - 0.01)))

    tasks = [asyncio.ensure_future(worker(i)) for i in range(concurrency)]
    tasks.append(asyncio.ensure_future(ticker()))
    cut: float | None = None  # when the warm-up ended (None: the step ended before)
    area_at_cut, busy_at_cut = 0.0, _run_time()
    try:
        while not st.stop.is_set():
            try:
                await asyncio.wait_for(st.stop.wait(), 0.02)
                break
            except TimeoutError:
                pass
            t = now()
            if deadline is not None and t >= deadline:
                break
            if cut is None and t >= t0 + lim.warmup and st.full is None:
                # (a budget spent within the warm-up: the step is judged on all its answers;
                # a cut after it measured only the drain, "in flight 0.0 of 1")
                st.change(t, 0)
                cut, area_at_cut, busy_at_cut = t, st.area, _run_time()
            kept = [a.done for a in st.answers if cut is not None and a.sent >= cut]
            if step_done(t0, t, kept, cut, lim) or (st.sent >= request_budget and st.in_flight == 0):
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    end = now()
    st.change(end, 0)
    busy_end = _run_time()
    if cut is None:  # stopped within the warm-up: judged on all its answers
        cut, area_at_cut = t0, 0.0
    window = max(end - cut, 1e-9)
    # requests in flight while the step was sending: the drain after its last request (the
    # probe stopped, the poll ends the step up to 20 ms later) is not the site's doing
    sending_end, area_end = st.full if st.full is not None else (end, st.area)
    in_flight = (area_end - area_at_cut) / max(sending_end - cut, 1e-9)
    busy = (busy_end - busy_at_cut) / window
    lag = percentile([late for t, late in lags if t >= cut], 0.95)
    return summarise(
        st.answers,
        concurrency=concurrency,
        phase=phase,
        start=t0,
        end=end,
        warmup=cut - t0,
        requests=st.sent,
        in_flight=in_flight,
        busy=busy,
        retry_after=st.retry_after,
        rate_ceiling=max_rate,
        loop_lag=lag,
    )
