"""The classifier: (request, response or exception) -> failure class and reason.

One rules table. User rules (``SCALE_FAILURE_RULES``) are checked first, in
order, first match wins; then the block-page detectors (for 2xx responses);
then the defaults of the design table. No reactor here: the classifier looks at
Scrapy ``Request``/``Response`` objects and exceptions only.

A rule is a dict::

    {"class": "blocked",                    # required, one of FailureClass
     "reason": "captcha",                   # optional, short and of bounded variety
     "status": [403, "5xx", "520-530"],     # response rule: status codes / ranges
     "exception": "pkg.mod.SomeError",      # exception rule: dotted path(s), isinstance
     "css": "form#captcha",                 # response predicates (any of css/xpath/regex;
     "xpath": "//title[contains(., 'Denied')]",  #  all given ones must match)
     "regex": "(?i)access denied",
     "domain": ["example.com"],             # host or any subdomain of it
     "proxy": True,                         # only when the request went through a proxy
     "retry_after": True}                   # only when the response has Retry-After

A rule must name at least one of status, exception, css, xpath, regex; an
exception rule cannot have response conditions. Bad rules fail at startup
(:func:`parse_rules` raises ``ValueError``, the settings layer names
``SCALE_FAILURE_RULES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
from scrapy.utils.misc import load_object
from twisted.internet import error as txerr
from twisted.web.client import ResponseFailed

from scrapy_scale.outcomes.model import FailureClass

if TYPE_CHECKING:
    from scrapy.http import Request, Response

C = FailureClass

_RULE_KEYS = {
    "class",
    "reason",
    "status",
    "exception",
    "css",
    "xpath",
    "regex",
    "domain",
    "proxy",
    "retry_after",
}
_RESPONSE_KEYS = {"status", "css", "xpath", "regex", "retry_after"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the classifier says about one attempt."""

    cls: FailureClass
    reason: str
    #: False when no rule matched an exception (a surprise: keep its traceback)
    expected: bool = True


@dataclass(frozen=True)
class Rule:
    cls: FailureClass
    reason: str
    statuses: frozenset[int] | None = None
    exceptions: tuple[type[BaseException], ...] | None = None
    domains: tuple[str, ...] | None = None
    proxy: bool | None = None
    retry_after: bool | None = None
    css: str | None = None
    xpath: Any = None  # compiled lxml XPath (from css or xpath)
    xpath_src: str | None = None
    regex: re.Pattern[str] | None = None

    @property
    def has_predicate(self) -> bool:
        return self.xpath is not None or self.regex is not None

    def matches_request(self, host: str, via_proxy: bool) -> bool:
        if self.proxy is not None and self.proxy != via_proxy:
            return False
        if self.domains is not None and not domain_matches(host, self.domains):
            return False
        return True

    def matches_response(self, response: Response, host: str, via_proxy: bool) -> bool:
        if self.exceptions is not None:
            return False
        if self.statuses is not None and response.status not in self.statuses:
            return False
        if not self.matches_request(host, via_proxy):
            return False
        if (
            self.retry_after is not None
            and (b"Retry-After" in response.headers) != self.retry_after
        ):
            return False
        if self.has_predicate:
            return self._predicate(response)
        return True

    def _predicate(self, response: Response) -> bool:
        text = getattr(response, "text", None) if hasattr(response, "selector") else None
        if text is None:  # binary response: no page to look at
            return False
        if self.regex is not None and not self.regex.search(text):
            return False
        if self.xpath is not None:
            try:
                found = self.xpath(response.selector.root)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - an unparsable page is not a match
                return False
            if not found:
                return False
        return True

    def matches_exception(self, exc: BaseException, host: str, via_proxy: bool) -> bool:
        return (
            self.exceptions is not None
            and isinstance(exc, self.exceptions)
            and self.matches_request(host, via_proxy)
        )


def domain_matches(host: str, domains: Iterable[str]) -> bool:
    for d in domains:
        if host == d or host.endswith("." + d):
            return True
    return False


# ---- rule parsing -------------------------------------------------------------

_RANGE = re.compile(r"^([1-5])xx$", re.I)
_SPAN = re.compile(r"^(\d{3})\s*-\s*(\d{3})$")


def _statuses(v: Any) -> frozenset[int]:
    items = v if isinstance(v, list | tuple | set | frozenset) else [v]
    out: set[int] = set()
    for x in items:
        if isinstance(x, bool):
            raise ValueError(f"bad status {x!r}")
        if isinstance(x, int):
            if not 100 <= x <= 599:
                raise ValueError(f"status {x} is not an HTTP status (100-599)")
            out.add(x)
            continue
        s = str(x).strip()
        if s.isdigit():
            out |= _statuses(int(s))
        elif m := _RANGE.match(s):
            base = int(m.group(1)) * 100
            out |= set(range(base, base + 100))
        elif m := _SPAN.match(s):
            lo, hi = int(m.group(1)), int(m.group(2))
            if not 100 <= lo <= hi <= 599:
                raise ValueError(f"bad status range {s!r}")
            out |= set(range(lo, hi + 1))
        else:
            raise ValueError(f'bad status {x!r} (use 404, "4xx" or "500-504")')
    if not out:
        raise ValueError("empty status list")
    return frozenset(out)


def _exceptions(v: Any) -> tuple[type[BaseException], ...]:
    items = v if isinstance(v, list | tuple) else [v]
    out = []
    for x in items:
        obj = x
        if isinstance(x, str):
            try:
                obj = load_object(x)
            except (ImportError, ValueError, AttributeError, NameError) as e:
                raise ValueError(f"cannot import exception {x!r}: {e}") from None
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise ValueError(f"{x!r} is not an exception class")
        out.append(obj)
    if not out:
        raise ValueError("empty exception list")
    return tuple(out)


def _domains(v: Any) -> tuple[str, ...]:
    items = v if isinstance(v, list | tuple | set) else [v]
    out = []
    for d in items:
        if not isinstance(d, str) or not d.strip() or "/" in d:
            raise ValueError(f"bad domain {d!r} (a host name such as example.com)")
        out.append(d.strip().lower().lstrip(".").removeprefix("*."))
    return tuple(out)


def _compile_xpath(expr: str, what: str) -> Any:
    from lxml import etree

    try:
        return etree.XPath(expr)
    except etree.XPathSyntaxError as e:
        raise ValueError(f"bad {what} {expr!r}: {e}") from None


def _css_to_xpath(sel: str) -> str:
    from cssselect import SelectorError
    from parsel.csstranslator import HTMLTranslator

    try:
        return HTMLTranslator().css_to_xpath(sel)
    except SelectorError as e:
        raise ValueError(f"bad css {sel!r}: {e}") from None


def reject_unknown_keys(where: str, given: Iterable[str], known: Iterable[str]) -> None:
    unknown = set(given) - set(known)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )


def parse_rule(raw: Any, index: int = 0) -> Rule:
    """One rule from its dict form; ``ValueError`` says what is wrong."""
    where = f"rule {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a dict, got {type(raw).__name__}")
    reject_unknown_keys(where, raw, _RULE_KEYS)
    if "class" not in raw:
        raise ValueError(f"{where}: missing 'class'")
    try:
        cls = FailureClass.parse(str(raw["class"]))
        if not ({"status", "exception", "css", "xpath", "regex"} & set(raw)):
            raise ValueError("needs at least one of status, exception, css, xpath, regex")
        if "exception" in raw and _RESPONSE_KEYS & set(raw):
            raise ValueError(
                "an exception rule cannot also have " + ", ".join(sorted(_RESPONSE_KEYS & set(raw)))
            )
        reason = raw.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ValueError("'reason' must be a string")
        for key in ("proxy", "retry_after"):
            if key in raw and not isinstance(raw[key], bool):
                raise ValueError(f"'{key}' must be True or False")
        xpath = None
        xpath_src = None
        if "css" in raw and "xpath" in raw:
            raise ValueError("give css or xpath, not both")
        if "css" in raw:
            if not isinstance(raw["css"], str):
                raise ValueError("'css' must be a string")
            xpath_src = _css_to_xpath(raw["css"])
            xpath = _compile_xpath(xpath_src, "css")
        elif "xpath" in raw:
            if not isinstance(raw["xpath"], str):
                raise ValueError("'xpath' must be a string")
            xpath_src = raw["xpath"]
            xpath = _compile_xpath(xpath_src, "xpath")
        regex = None
        if "regex" in raw:
            if not isinstance(raw["regex"], str):
                raise ValueError("'regex' must be a string")
            try:
                regex = re.compile(raw["regex"])
            except re.error as e:
                raise ValueError(f"bad regex {raw['regex']!r}: {e}") from None
        rule = Rule(
            cls=cls,
            reason=reason or _default_reason(raw, index),
            statuses=_statuses(raw["status"]) if "status" in raw else None,
            exceptions=_exceptions(raw["exception"]) if "exception" in raw else None,
            domains=_domains(raw["domain"]) if "domain" in raw else None,
            proxy=raw.get("proxy"),
            retry_after=raw.get("retry_after"),
            css=raw.get("css"),
            xpath=xpath,
            xpath_src=xpath_src,
            regex=regex,
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return rule


def _default_reason(raw: dict[str, Any], index: int) -> str:
    for key in ("css", "xpath", "regex"):
        if key in raw:
            return f"rule {index}: {key} {str(raw[key])[:40]}"
    if "exception" in raw:
        return f"rule {index}: exception"
    return f"rule {index}: status"


def parse_rules(value: Any) -> list[Rule]:
    """Validate ``SCALE_FAILURE_RULES`` (a list of rule dicts, or its JSON)."""
    from scrapy_scale.config import as_json_value

    v = as_json_value(value)
    if isinstance(v, dict):
        v = [v]
    if not isinstance(v, list | tuple):
        raise ValueError("expected a list of rule dicts")
    return [r if isinstance(r, Rule) else parse_rule(r, i) for i, r in enumerate(v)]


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


class Classifier:
    """Classify responses and download exceptions; see the module docstring for the order.

    ``retry_http_codes``: Scrapy's RETRY_HTTP_CODES when the project set it: a listed
    status the defaults call ``fatal`` becomes ``transient`` (the caller also stops
    retrying transient/rate-limited statuses that are not listed).

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
    ):
        rules = list(rules)
        self.response_rules = [r for r in rules if r.exceptions is None]
        user_exception_rules = [r for r in rules if r.exceptions is not None]
        self.exception_rules = user_exception_rules + default_exception_rules()
        #: index of the first default rule in exception_rules (the ones RETRY_EXCEPTIONS adjusts)
        self._first_default = len(user_exception_rules)
        self.retry_exceptions = tuple(retry_exceptions or ())
        self.detectors = list(detectors)
        self.status_table = dict(_STATUS_TABLE)
        if retry_http_codes is not None:
            for s in retry_http_codes:
                if 100 <= s < 600 and self.status_table[s].cls is C.FATAL:
                    self.status_table[s] = Verdict(C.TRANSIENT, f"HTTP {s}")

    def classify_response(self, response: Response, request: Request | None = None) -> Verdict:
        request = request if request is not None else response.request
        if self.response_rules:
            host, via_proxy = _host_and_proxy(request, response)
            for rule in self.response_rules:
                if rule.matches_response(response, host, via_proxy):
                    return Verdict(rule.cls, rule.reason)
        status = response.status
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
        if status == 503 and b"Retry-After" in response.headers and v.cls is C.TRANSIENT:
            return _503_RETRY_AFTER
        return v

    def classify_exception(self, exc: BaseException, request: Request | None) -> Verdict:
        host, via_proxy = _host_and_proxy(request, None)
        for i, rule in enumerate(self.exception_rules):
            if rule.matches_exception(exc, host, via_proxy):
                if rule.cls is C.FATAL and i >= self._first_default and self._listed(exc):
                    break
                return Verdict(rule.cls, rule.reason or type(exc).__name__)
        if self._listed(exc):
            return Verdict(C.TRANSIENT, type(exc).__name__)  # RETRY_EXCEPTIONS lists it
        return Verdict(C.FATAL, type(exc).__name__, expected=False)

    def _listed(self, exc: BaseException) -> bool:
        # IgnoreRequest (robots.txt, offsite...) is a decision, not a failure: never retried
        return (bool(self.retry_exceptions) and isinstance(exc, self.retry_exceptions)
                and not isinstance(exc, IgnoreRequest))


def _host_and_proxy(request: Request | None, response: Response | None) -> tuple[str, bool]:
    if request is None:
        if response is None:
            return "", False
        return (urlparse_cached(response).hostname or ""), False
    return (urlparse_cached(request).hostname or ""), bool(request.meta.get("proxy"))
