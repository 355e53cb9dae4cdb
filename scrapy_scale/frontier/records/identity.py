"""Record identity: which frontier record a request belongs to.

A request chain -- a request, its retries and its redirects -- is one record, keyed by
the first request's fingerprint (``meta["scale_fingerprint"]``). Plain Python over the
crawler's request fingerprinter; what is in flight on this worker is asked through a
callable, so this module knows nothing of the scheduler's other parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scrapy import Request

from scrapy_scale import meta_keys
from scrapy_scale.frontier.store import NewRequest, again_key, domain_of, key_base

#: the URL of the request in flight on this worker under a record key (None: none is)
InFlightUrl = Callable[[str], "str | None"]


@dataclass(frozen=True)
class RetryFields:
    """What a request's meta says about its place in its chain."""

    attempt: int
    not_before: float
    last_failure: tuple[str, str] | None


def retry_fields(request: Request) -> RetryFields:
    last = request.meta.get(meta_keys.LAST_FAILURE)
    return RetryFields(
        attempt=meta_keys.attempt_of(request.meta),
        not_before=meta_keys.not_before_of(request.meta) or 0.0,
        last_failure=(str(last[0]), str(last[1])) if isinstance(last, list | tuple) and len(last) == 2 else None,
    )


def reopens(request: Request, update: bool, *, dedup: bool) -> bool:
    """Is ``request`` fetched again whatever its record's state (``dont_filter``, or no
    deduplication in the project)? Never a start request (a resume must not refetch its
    seeds) nor a continuation of a record (``update``)."""
    return (request.dont_filter or not dedup) and not request.meta.get("is_start_request") and not update


def new_record(
    request: Request, fp: str, update: bool, data: str, *, dedup: bool, fifo: bool = False, start_fifo: bool = True
) -> NewRequest:
    """The record of ``request`` (key ``fp``, encoded as ``data``) to enqueue; ``update``:
    it continues the record (a retry, a redirect); ``dedup``: False when the project
    turned deduplication off (then it reopens its record, as ``dont_filter``). ``fifo``:
    every request waits behind (the project chose FIFO queues); ``start_fifo``: start
    requests wait behind the crawl's own requests, in the order they came (Scrapy's
    start queues)."""
    chain = retry_fields(request)
    is_start = bool(request.meta.get("is_start_request"))
    reopen = reopens(request, update, dedup=dedup)
    return NewRequest(
        fingerprint=fp,
        data=data,
        domain=domain_of(request.url),
        priority=request.priority,
        not_before=chain.not_before,
        attempts=max(0, chain.attempt - 1),
        last_failure=chain.last_failure,
        update=update,
        reopen=reopen,
        # fetched again even while the record is pending or leased: then under a key of its own
        again=again_key(fp) if reopen else "",
        tail=fifo or (is_start and start_fifo),
    )


class RecordIdentity:
    def __init__(self, fingerprinter: Any):
        self.fingerprinter = fingerprinter

    def key(self, request: Request, in_flight_url: InFlightUrl) -> tuple[str, bool]:
        """The record key of ``request``, and whether it continues a known record:
        a retry (same fingerprint, ``dont_filter`` as every retry has, and attempt > 1
        or in flight here) or a redirect of a request in flight here. Anything else
        -- e.g. a request that copied ``response.meta`` -- is deduplicated as usual.
        Sets ``meta["scale_fingerprint"]`` to the key."""
        real = self.fingerprinter.fingerprint(request).hex()
        given = request.meta.get(meta_keys.FINGERPRINT)
        attempt = meta_keys.attempt_of(request.meta)
        fp, update = real, False
        given_url = in_flight_url(given) if given else None
        if given and key_base(given) == real:  # its own record, or a dont_filter one of its own
            update = request.dont_filter and (attempt > 1 or given_url is not None)
            fp = given if update else real
        elif given_url is not None:
            redirects = request.meta.get("redirect_urls") or []
            if redirects and redirects[-1] == given_url:
                fp, update = given, True
        if given and fp != given:
            # it copied another request's meta (response.meta): a chain of its own, from attempt 1
            for k in meta_keys.CHAIN_KEYS:
                request.meta.pop(k, None)
        request.meta[meta_keys.FINGERPRINT] = fp
        return fp, update


def as_int(v: Any, default: int) -> int:
    try:
        return int(v) if v is not None else default
    except (TypeError, ValueError, OverflowError):
        return default
