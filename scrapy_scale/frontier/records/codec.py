"""Requests as data: versioned JSON from ``Request.to_dict``; never pickle.

A shared store must not become a code-execution channel, so a stored request is
plain JSON: ``{"v": 2, "r": <Request.to_dict(spider=...)>}`` without the fields left at
``Request``'s defaults, or only the URL as a JSON string (``"https://..."``) when that is
all that differs (older records hold every field; both read back), with the values JSON
has no type for tagged (:mod:`scrapy_scale.frontier.records.values`: bytes, dicts with
non-string keys, tuples, sets, dates and times, decimals, items). Format 1 records
(``{"v": 1, ...}``: only the bytes and dict tags) read back as they always did.
Callbacks are stored by name and looked up on the spider when the request is rebuilt.

A record comes from a store other processes write to (a shared Redis), so rebuilding one
must never run code or read local files (docs/frontier.md, "What a shared Redis can and
cannot do to a worker"). :class:`RecordRules` (:mod:`.record_rules`) says what a record
may name, checked on encode and on decode (and on feed messages):

- a request class (``_class``) only when the project allows it (:func:`allowed_class`,
  checked on the dotted path BEFORE anything is imported);
- a URL only of an allowed scheme (http and https unless ``SCALE_FRONTIER_SCHEMES``);
- a callback/errback only when it is a public method of the spider (:func:`spider_method`);
- an item class (in ``meta`` or ``cb_kwargs``) only when it is a scrapy.Item, dataclass or
  attrs class of the spider's own package or allowed as above (:func:`item_class`).

Anything else raises :class:`CodecError` (the scheduler dead-letters the record).
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import weakref
from collections.abc import Callable
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import RequestFingerprinter

from scrapy_scale import meta_keys, shared_values
from scrapy_scale.frontier import settings as _settings  # noqa: F401 - declares SCALE_FRONTIER_*
from scrapy_scale.frontier.records import values
from scrapy_scale.frontier.records.model import NewRequest, domain_of
from scrapy_scale.frontier.records.record_rules import (
    DEFAULT_SCHEMES,
    SCRAPY_CALLBACKS,
    SCRAPY_REQUEST_CLASSES,
    CodecError,
    NotStorable,
    RecordRules,
    SchemeRefused,
    allowed_class,
    check_url,
    item_class,
    spider_method,
)

__all__ = [
    "DEFAULT_SCHEMES",
    "READS",
    "SCRAPY_CALLBACKS",
    "SCRAPY_REQUEST_CLASSES",
    "SchemeRefused",
    "VERSION",
    "CodecError",
    "NotStorable",
    "RecordRules",
    "allowed_class",
    "check_url",
    "decode",
    "default_fingerprint",
    "encode",
    "item_class",
    "memory_marker",
    "new_request",
    "request_dict",
    "request_from_dict",
    "request_from_feed",
    "spider_method",
]

#: version of the stored request format written; decode() reads these and refuses others
VERSION = 2
READS = (1, 2)


def _check_names(d: dict[str, Any], spider: Spider | None, rules: RecordRules) -> None:
    """What a request as a dict names is allowed (URL scheme, class, callbacks)."""
    check_url(d.get("url"), rules)
    if d.get("_class") is not None:
        allowed_class(d["_class"], Request, rules.classes)
    if spider is not None:
        for key in ("callback", "errback"):
            if d.get(key):
                spider_method(spider, d[key], key)


def request_from_dict(d: dict[str, Any], spider: Spider | None, rules: RecordRules) -> Request:
    """:func:`scrapy.utils.request.request_from_dict` under ``rules``: the URL scheme, the
    class and the callbacks are checked before the class is imported or anything built."""
    check_url(d.get("url"), rules)
    request_cls: type[Request] = Request if "_class" not in d else allowed_class(d["_class"], Request, rules.classes)
    kwargs = {key: value for key, value in d.items() if key in request_cls.attributes}
    if spider is not None:
        for key in ("callback", "errback"):
            if d.get(key):
                kwargs[key] = spider_method(spider, d[key], key)
    return request_cls(**kwargs)


@functools.lru_cache(maxsize=64)
def _encoder(rules: RecordRules) -> values.Encoder:
    return values.Encoder(lambda path: item_class(path, rules))


@functools.lru_cache(maxsize=64)
def _v2_loads(rules: RecordRules) -> Callable[[str], Any]:
    return json.JSONDecoder(object_hook=values.v2_hook(lambda path: item_class(path, rules))).decode


_v1_loads = json.JSONDecoder(object_hook=values.v1_hook).decode
_VERSION_RE = re.compile(r'\s*\{\s*"v"\s*:\s*(\d+)')


def _parse(data: str, rules: RecordRules) -> Any:
    """JSON with the tags of the record's format (read from its ``"v"``)."""
    m = _VERSION_RE.match(data)
    v2 = m is not None and m.group(1) == "2"
    doc = (_v2_loads(rules) if v2 else _v1_loads)(data)
    if isinstance(doc, dict) and (doc.get("v") == 2) != v2:  # "v" was not written first
        doc = (_v1_loads if v2 else _v2_loads(rules))(data)
    return doc


def encode(request: Request, spider: Spider | None = None, rules: RecordRules | None = None) -> str:
    """The request as versioned JSON. Raises :class:`CodecError` when a value
    (in meta, cb_kwargs...) is not plain data, or the request names what a record may
    not (a callback that is not a public spider method, a class or URL scheme ``rules``
    do not allow): such a record would be refused when read back."""
    try:
        d = request_dict(request, spider)
    except ValueError as e:  # callback not found on the spider
        raise CodecError(str(e)) from None
    rules = rules or RecordRules.for_crawl(spider)
    _check_names(d, spider, rules)
    d = compact(d)
    if len(d) == 1:  # differs from Scrapy's defaults only in its URL: the URL alone
        return _dumps(d["url"])
    try:
        return _dumps({"v": VERSION, "r": _encoder(rules)(d)})
    except values.Unstorable as e:
        raise NotStorable(e.type_name, str(e)) from None


#: what ``Request.to_dict`` gives for a field left at ``Request``'s default: such a field is
#: not stored (the request rebuilt without it is the same), so a record holds what differs
_DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "method": "GET",
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
}


def compact(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (a plain ``Request``'s dict) without the fields at their default; a subclass's
    dict is kept whole (its constructor may give a missing field another default)."""
    if "_class" in d:
        return d
    return {k: v for k, v in d.items() if k not in _DEFAULTS or type(v) is not type(_DEFAULTS[k]) or v != _DEFAULTS[k]}


def request_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, the same dict, with the callback's name looked up
    once per spider and function: Scrapy's ``to_dict`` walks every member of the spider
    (``inspect.getmembers``, properties included) for each request, which cost more than
    the rest of the encoding together (0.25 ms of 0.5 ms per request on the bench crawl)."""
    cb, eb = request.callback, request.errback
    if not (callable(cb) or callable(eb)) or spider is None:
        return request.to_dict(spider=spider)
    d: dict[str, Any] = {
        "url": request.url,
        "callback": _method_name(spider, cb) if callable(cb) else cb,
        "errback": _method_name(spider, eb) if callable(eb) else eb,
        "headers": dict(request.headers),
    }
    for attr in request.attributes:
        d.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        d["_class"] = type(request).__module__ + "." + type(request).__name__
    return d


#: spider -> {function: the name Scrapy's ``_find_method`` gave it}
_METHOD_NAMES: weakref.WeakKeyDictionary[Any, dict[Any, str]] = weakref.WeakKeyDictionary()


def _method_name(spider: Spider, func: Callable[..., Any]) -> str:
    """The spider's name for the method ``func`` (as ``Request.to_dict`` finds it), cached;
    a cached name is used only while the spider still has that method under it."""
    raw = getattr(func, "__func__", None)
    if raw is None:
        raise ValueError(f"Function {func} is not an instance method in: {spider}")
    try:
        names = _METHOD_NAMES.setdefault(spider, {})
    except TypeError:  # a spider that cannot be weakly referenced: no cache
        return _find_method(spider, raw, func)
    name = names.get(raw)
    if name is not None and getattr(getattr(spider, name, None), "__func__", None) is raw:
        return name
    name = names[raw] = _find_method(spider, raw, func)
    return name


def _find_method(spider: Spider, raw: Any, func: Any) -> str:
    """What Scrapy's ``Request.to_dict`` does: the first (by name) bound method of the
    spider whose function is ``raw``; the same ValueError when there is none."""
    for name, member in inspect.getmembers(spider, predicate=inspect.ismethod):
        if member.__func__ is raw:
            return name
    raise ValueError(f"Function {func} is not an instance method in: {spider}")


#: ``json.dumps(..., separators=(",", ":"))`` without building an encoder per call (same output)
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def decode(data: str, spider: Spider | None = None, rules: RecordRules | None = None) -> Request:
    """Rebuild the request. Raises :class:`CodecError` with the reason when the
    record cannot be read (bad JSON, unknown version, missing callback...) or names
    what ``rules`` do not allow (default: :meth:`RecordRules.for_crawl` of ``spider``)."""
    rules = rules or RecordRules.for_crawl(spider)
    try:
        if isinstance(data, bytes | bytearray):  # a store that hands back bytes
            data = data.decode("utf-8")
        if not isinstance(data, str):
            raise CodecError(f"not JSON: a {type(data).__name__}")
        doc = _parse(data, rules)
    except CodecError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CodecError(f"not JSON: {e}") from None
    except Exception as e:  # noqa: BLE001 - a marker that is not what it says ({"$b": 1}, bad base64...)
        raise CodecError(f"cannot rebuild the request: {type(e).__name__}: {e}") from None
    if isinstance(doc, dict) and "m" in doc and doc.get("v") == 2:
        raise CodecError(
            f"a request kept in memory only (it held a {doc['m']}, which cannot be stored), "
            "lost when its worker stopped before finishing it"
        )
    if isinstance(doc, str):  # a request that differs from the defaults only in its URL
        doc = {"v": VERSION, "r": {"url": doc}}
    if not isinstance(doc, dict) or "r" not in doc:
        raise CodecError("not a stored request (no 'r' field)")
    if doc.get("v") not in READS:
        raise CodecError(f"stored request format version {doc.get('v')!r}; this code reads {READS}")
    if not isinstance(doc["r"], dict):
        raise CodecError("not a stored request ('r' is not an object)")
    try:
        request = request_from_dict(doc["r"], spider, rules)
    except CodecError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure means "cannot be rebuilt"
        raise CodecError(f"cannot rebuild the request: {type(e).__name__}: {e}") from None
    # the chain's keys in its meta are shared state too: a bad one is dropped (one warning),
    # the page crawled (a not-before in 2100 held its record for ever, text or a number
    # where a list belongs raised on the request path)
    meta_keys.check_stored(request.meta)
    return request


def memory_marker(type_name: str) -> str:
    """The data stored for a request kept in memory only: no request, only why."""
    return _dumps({"v": VERSION, "m": type_name})


_default_fingerprinter: RequestFingerprinter | None = None


def default_fingerprint(request: Request) -> str:
    """Scrapy's default request fingerprint, hex (for seeds from outside a crawl)."""
    global _default_fingerprinter
    if _default_fingerprinter is None:
        _default_fingerprinter = RequestFingerprinter()
    return _default_fingerprinter.fingerprint(request).hex()


def new_request(
    r: Request | str,
    *,
    priority: int | None = None,
    fingerprint: str | None = None,
    spider: Spider | None = None,
    rules: RecordRules | None = None,
) -> NewRequest:
    """A seed (URL or Request) as a :class:`NewRequest` (dedup on, no update)."""
    request = Request(r) if isinstance(r, str) else r
    fp = fingerprint or default_fingerprint(request)
    return NewRequest(
        fingerprint=fp,
        data=encode(request, spider, rules),
        domain=domain_of(request.url),
        priority=request.priority if priority is None else priority,
        tail=True,
    )


def request_from_feed(message: str | bytes, spider: Spider | None = None, rules: RecordRules | None = None) -> Request:
    """A request from a feeder's JSON message: a URL string (``"https://..."``) or an
    object with ``url`` and optionally ``callback`` (a public spider method's name),
    ``method``, ``headers``, ``body``, ``meta``, ``cb_kwargs``, ``priority``,
    ``dont_filter``. The URL's scheme must be one ``rules`` allow."""
    try:
        # the one decoder of shared values: JSON nested 100,000 deep raised RecursionError
        # here, which failed every sync while the message stayed taken (issue 35)
        doc = shared_values.loads(message)
    except shared_values.Refused as e:
        raise CodecError(f"feed message is not JSON: {e}") from None
    if isinstance(doc, str):
        doc = {"url": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        raise CodecError("feed message must be a URL string or an object with a 'url'")
    allowed = {
        "url",
        "callback",
        "errback",
        "method",
        "headers",
        "body",
        "meta",
        "cb_kwargs",
        "priority",
        "dont_filter",
        "cookies",
        "flags",
        "encoding",
    }
    unknown = set(doc) - allowed
    if unknown:
        raise CodecError(f"feed message has unknown fields: {', '.join(sorted(unknown))}")
    try:
        return request_from_dict(doc, spider, rules or RecordRules.for_crawl(spider))
    except CodecError as e:
        raise CodecError(f"feed message refused: {e}") from None
    except Exception as e:  # noqa: BLE001
        raise CodecError(f"feed message cannot be a request: {type(e).__name__}: {e}") from None
