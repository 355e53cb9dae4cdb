"""The classifier: every decision about what an attempt was, in one place.

(request, response or exception, what the callback produced) -> :class:`Verdict`:
the failure class and reason, the server's Retry-After, and whether the project's
Scrapy settings (``RETRY_HTTP_CODES``, ``RETRY_EXCEPTIONS``) let it be retried.
User rules (``SCALE_FAILURE_RULES``, :mod:`scrapy_scale.outcomes.rules`) are checked
first, in order, first match wins; then, for a request that went through a proxy, the
proxy's own error answers (:mod:`scrapy_scale.outcomes.proxy_answers`); then the
block-page detectors (for 2xx responses); then the defaults of the class table. The parse checks (callback
raised, no items, critical fields missing) are :meth:`Classifier.classify_parse`.
No reactor here: the classifier looks at Scrapy ``Request``/``Response`` objects
and exceptions only, and takes the time from an injectable clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    NotSupported,
    ResponseDataLossError,
    UnsupportedURLSchemeError,
)
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import error as txerr
from twisted.web.client import ResponseFailed

from scrapy_scale.clock import Clock, wall
from scrapy_scale.errors import NoEgressError
from scrapy_scale.outcomes.browser_errors import browser_verdict
from scrapy_scale.outcomes.model import Blame, FailureClass
from scrapy_scale.outcomes.proxy_answers import proxy_answer
from scrapy_scale.outcomes.retry_after import largest_retry_after
from scrapy_scale.outcomes.rules import (  # noqa: F401 - re-exported (the public rule API)
    Rule,
    domain_matches,
    parse_rule,
    parse_rules,
    reject_unknown_keys,
)

if TYPE_CHECKING:
    from scrapy.http import Request, Response

C = FailureClass

#: classes whose retry a Scrapy RETRY_HTTP_CODES set by the project may forbid
_GATED = frozenset({C.RATE_LIMITED, C.TRANSIENT})
#: classes for which the server's Retry-After is read
_RETRY_AFTER_CLASSES = frozenset({C.RATE_LIMITED, C.TRANSIENT})


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the classifier says about one attempt."""

    cls: FailureClass
    reason: str
    #: False when no rule matched an exception (a surprise: keep its traceback)
    expected: bool = True
    #: False when the project's RETRY_HTTP_CODES / RETRY_EXCEPTIONS do not list it
    retryable: bool = True
    #: seconds the server asked to wait (Retry-After; may be negative), None when absent
    retry_after: float | None = None
    #: the Retry-After header as sent
    retry_after_raw: str | None = None
    #: the site says it is overloaded without a Retry-After (a 503 without one)
    slow_down: bool = False
    #: who is at fault when not the class's default (:data:`~scrapy_scale.outcomes.model.CLASSES`)
    blame: Blame | None = None


# ---- block-page detectors -------------------------------------------------------


class BlockPageDetector:
    """Base class of pluggable block-page detectors (``SCALE_BLOCK_DETECTORS``).

    ``detect`` sees every 2xx response not already classified by a user rule and
    returns a short reason when the page is a block page (it is then ``blocked``,
    retried through another egress), else None. It must be cheap: it runs on the
    hot path. A ``from_crawler(crawler)`` classmethod is used when present.
    """

    def detect(self, response: Response, request: Request) -> str | None:
        return None


class SignatureBlockDetector(BlockPageDetector):
    """Opt-in detector of well-known bot-wall pages (challenge, captcha) in small HTML bodies."""

    max_body = 64 * 1024
    signatures: Sequence[tuple[bytes, str]] = (
        (b"cf-browser-verification", "cloudflare challenge"),
        (b"challenge-platform", "cloudflare challenge"),
        (b"g-recaptcha", "captcha"),
        (b"h-captcha", "captcha"),
        (b"px-captcha", "captcha"),
        (b"_Incapsula_Resource", "incapsula"),
        (b"distil_r_captcha", "captcha"),
    )

    def detect(self, response: Response, request: Request) -> str | None:
        body = response.body
        if len(body) > self.max_body:
            return None
        for sig, reason in self.signatures:
            if sig in body:
                return reason
        return None


# ---- defaults -------------------------------------------------------------------------


def _tunnel_error() -> type[BaseException]:
    from scrapy.core.downloader.handlers.http11 import TunnelError

    return TunnelError


_CONNECT_ERRORS: tuple[type[BaseException], ...] = (
    DownloadConnectionRefusedError,
    CannotResolveHostError,
    txerr.ConnectError,
    txerr.DNSLookupError,
    ConnectionRefusedError,
)

_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DownloadTimeoutError,
    DownloadFailedError,
    ResponseDataLossError,
    DownloadConnectionRefusedError,
    CannotResolveHostError,
    DownloadCancelledError,
    txerr.TimeoutError,
    txerr.ConnectError,
    txerr.ConnectionDone,
    txerr.ConnectionLost,
    txerr.DNSLookupError,
    ResponseFailed,
    OSError,  # also what HttpCompressionMiddleware raises on an empty compressed body
)


def default_exception_rules() -> list[Rule]:
    return [
        # before "ignored": a request the egress pool had no egress for, never sent
        Rule(C.EGRESS_FAILED, "no egress", exceptions=(NoEgressError,)),
        Rule(C.FATAL, "ignored", exceptions=(IgnoreRequest,)),
        Rule(C.EGRESS_FAILED, "proxy tunnel", exceptions=(_tunnel_error(),)),
        Rule(C.EGRESS_FAILED, "proxy unreachable", exceptions=_CONNECT_ERRORS, proxy=True),
        Rule(C.FATAL, "unsupported", exceptions=(UnsupportedURLSchemeError, NotSupported)),
        Rule(C.TRANSIENT, "", exceptions=_TRANSIENT_ERRORS),
    ]


_TRANSIENT_5XX = {
    500,
    502,
    503,
    504,
    507,
    508,
    509,
    520,
    521,
    522,
    523,
    524,
    525,
    526,
    527,
    529,
    530,
    598,
    599,
}


def default_status_verdict(status: int) -> Verdict:
    if 200 <= status < 400:
        return Verdict(C.OK, "")
    if status in (404, 410):
        return Verdict(C.NOT_FOUND, f"HTTP {status}")
    if status == 429:
        return Verdict(C.RATE_LIMITED, "HTTP 429")
    if status in (401, 403):
        return Verdict(C.BLOCKED, f"HTTP {status}")
    if status == 407:
        return Verdict(C.EGRESS_FAILED, "HTTP 407")
    if status == 408 or status in _TRANSIENT_5XX:
        return Verdict(C.TRANSIENT, f"HTTP {status}")
    return Verdict(C.FATAL, f"HTTP {status}")


_STATUS_TABLE = {s: default_status_verdict(s) for s in range(100, 600)}
_503_RETRY_AFTER = Verdict(C.RATE_LIMITED, "HTTP 503 Retry-After")
#: overloaded, for how long unsaid: retried soon as any 5xx, and a pacing signal (Outcome.slow_down)
_503_OVERLOADED = Verdict(C.TRANSIENT, "HTTP 503", slow_down=True)


class Classifier:
    """Classify responses, download exceptions and callback results; see the module docstring.

    ``retry_http_codes``: Scrapy's RETRY_HTTP_CODES when the project set it: a listed
    status the defaults call ``fatal`` becomes ``transient``, and a transient or
    rate-limited status that is not listed is not retryable (``Verdict.retryable``).
    ``retry_exceptions``: Scrapy's RETRY_EXCEPTIONS when the project set it: an exception
    of a listed class that the defaults call ``fatal`` becomes ``transient`` (your
    ``SCALE_FAILURE_RULES`` still come first).
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        detectors: Iterable[BlockPageDetector] = (),
        retry_http_codes: Iterable[int] | None = None,
        retry_exceptions: Iterable[type[BaseException]] | None = None,
        clock: Clock = wall,
    ):
        rules = list(rules)
        self.clock = clock
        self.response_rules = [r for r in rules if r.exceptions is None]
        user_exception_rules = [r for r in rules if r.exceptions is not None]
        self.exception_rules = user_exception_rules + default_exception_rules()
        #: index of the first default rule in exception_rules (the ones RETRY_EXCEPTIONS adjusts)
        self._first_default = len(user_exception_rules)
        self.retry_exceptions = tuple(retry_exceptions or ())
        self.detectors = list(detectors)
        self.status_table = dict(_STATUS_TABLE)
        self.retry_codes = frozenset(retry_http_codes) if retry_http_codes is not None else None
        if self.retry_codes is not None:
            for s in self.retry_codes:
                if 100 <= s < 600 and self.status_table[s].cls is C.FATAL:
                    self.status_table[s] = Verdict(C.TRANSIENT, f"HTTP {s}")

    def classify_response(self, response: Response, request: Request | None = None) -> Verdict:
        v = self._response_class(response, request if request is not None else response.request)
        if v.cls in _RETRY_AFTER_CLASSES:
            raws = response.headers.getlist(b"Retry-After")
            if raws:
                seconds, text = largest_retry_after(raws, self.clock())
                v = replace(v, retry_after=seconds, retry_after_raw=text)
        if self.retry_codes is not None and v.cls in _GATED and response.status not in self.retry_codes:
            v = replace(v, retryable=False)  # the project's RETRY_HTTP_CODES does not list it
        return v

    def _response_class(self, response: Response, request: Request | None) -> Verdict:
        status = response.status
        if self.response_rules or status >= 400:
            host, via_proxy = _host_and_proxy(request, response)
            for rule in self.response_rules:
                if rule.matches_response(response, host, via_proxy):
                    return Verdict(rule.cls, rule.reason)
            if via_proxy and status != 407 and (proxy_made := proxy_answer(response)) is not None:
                # the proxy answered for itself: the egress failed, at this site at least
                return Verdict(C.EGRESS_FAILED, proxy_made, blame=Blame.EGRESS_SITE)
        v = self.status_table.get(status)
        if v is None:
            return Verdict(C.FATAL, f"HTTP {status}")
        if v.cls is C.OK:
            if self.detectors and 200 <= status < 300 and request is not None:
                for d in self.detectors:
                    reason = d.detect(response, request)
                    if reason:
                        return Verdict(C.BLOCKED, f"block page: {reason}")
            return v
        if status == 503 and v.cls is C.TRANSIENT:
            return _503_RETRY_AFTER if b"Retry-After" in response.headers else _503_OVERLOADED
        return v

    def classify_exception(self, exc: BaseException, request: Request | None) -> Verdict:
        host, via_proxy = _host_and_proxy(request, None)
        for i, rule in enumerate(self.exception_rules):
            if i == self._first_default and (browser := browser_verdict(exc)) is not None:
                return Verdict(*browser)  # after the user's rules, before the defaults
            if rule.matches_exception(exc, host, via_proxy):
                if rule.cls is C.FATAL and i >= self._first_default and self._listed(exc):
                    break
                return Verdict(rule.cls, rule.reason or type(exc).__name__)
        if self._listed(exc):
            return Verdict(C.TRANSIENT, type(exc).__name__)  # RETRY_EXCEPTIONS lists it
        return Verdict(C.FATAL, type(exc).__name__, expected=False)

    def _listed(self, exc: BaseException) -> bool:
        # IgnoreRequest (robots.txt, offsite...) is a decision, not a failure: never retried
        return (
            bool(self.retry_exceptions)
            and isinstance(exc, self.retry_exceptions)
            and not isinstance(exc, IgnoreRequest)
        )

    def classify_parse(
        self,
        verdict: Verdict,
        *,
        error: BaseException | None = None,
        missing: Sequence[str] = (),
        items: int = 0,
        expects_items: bool = False,
        retried_by_callback: bool = False,
    ) -> tuple[Verdict, str | None]:
        """The verdict on a response once its callback output was consumed, and the kind of
        parse failure (``callback_error``, ``missing_fields``, ``no_items``) or None.

        ``verdict`` is the response's; ``error`` what the callback raised (an ``HttpError``
        from Scrapy's HttpErrorMiddleware is not the callback's fault)."""
        kind = None
        if error is not None and not _is_http_error(error):
            kind, reason = "callback_error", f"callback raised {type(error).__name__}"
        elif verdict.cls is C.OK and error is None:
            if missing:
                kind, reason = "missing_fields", "missing fields: " + ", ".join(sorted(missing))
            elif items == 0 and expects_items:
                kind, reason = "no_items", "no items"
        if kind is not None:
            verdict = Verdict(C.PARSE_FAILED, reason)
        if retried_by_callback and verdict.cls is C.OK:
            verdict = Verdict(C.PARSE_FAILED, "retried by the callback")
        return verdict, kind


def _is_http_error(exc: BaseException) -> bool:
    from scrapy.spidermiddlewares.httperror import HttpError

    return isinstance(exc, HttpError)


def _host_and_proxy(request: Request | None, response: Response | None) -> tuple[str, bool]:
    if request is None:
        if response is None:
            return "", False
        return (urlparse_cached(response).hostname or ""), False
    return (urlparse_cached(request).hostname or ""), bool(request.meta.get("proxy"))
