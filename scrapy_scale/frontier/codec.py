"""Requests as data: versioned JSON from ``Request.to_dict``; never pickle.

A shared store must not become a code-execution channel, so a stored request is
plain JSON: ``{"v": 2, "r": <Request.to_dict(spider=...)>}`` with the values JSON
has no type for tagged (:mod:`scrapy_scale.frontier.values`: bytes, dicts with
non-string keys, tuples, sets, dates and times, decimals, items). Format 1 records
(``{"v": 1, ...}``: only the bytes and dict tags) read back as they always did.
Callbacks are stored by name and looked up on the spider when the request is rebuilt.

A record comes from a store other processes write to (a shared Redis), so rebuilding one
must never run code or read local files (docs/frontier.md, "What a shared Redis can and
cannot do to a worker"). :class:`RecordRules` says what a record may name, checked on
encode and on decode (and on feed messages):

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
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.utils.misc import load_object
from scrapy.utils.request import RequestFingerprinter

from scrapy_scale import compat
from scrapy_scale.errors import ScaleError
from scrapy_scale.frontier import settings as _settings  # noqa: F401 - declares SCALE_FRONTIER_*
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier import values
from scrapy_scale.frontier.store import NewRequest, domain_of

#: version of the stored request format written; decode() reads these and refuses others
VERSION = 2
READS = (1, 2)


class CodecError(ScaleError, ValueError):
    """A request cannot be written as data, or a stored record cannot be read back."""


class SchemeRefused(CodecError):
    """A request's URL is of a scheme ``SCALE_FRONTIER_SCHEMES`` does not allow."""


class NotStorable(CodecError):
    """A request holds a value that cannot be stored as data; ``type_name`` names it."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


T = TypeVar("T")

#: Scrapy's own request classes: a record may always name them
SCRAPY_REQUEST_CLASSES = frozenset(
    {
        "scrapy.Request",
        "scrapy.http.request.Request",
        "scrapy.http.request.form.FormRequest",
        "scrapy.http.request.json_request.JsonRequest",
        "scrapy.http.request.rpc.XmlRpcRequest",
    }
)
DEFAULT_SCHEMES = ("http", "https")
#: private methods of Scrapy's own generic spiders that Scrapy itself uses as callbacks
#: (CrawlSpider rules, SitemapSpider); any other private method is never a callback
SCRAPY_CALLBACKS = frozenset({"parse", "_parse", "parse_start_url", "_callback", "_errback", "_parse_sitemap"})

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


@dataclass(frozen=True)
class RecordRules:
    """What a stored record or a feed message may name; see the module docstring."""

    #: dotted paths of classes, or of modules (every class defined in them), a record may name
    classes: frozenset[str] = SCRAPY_REQUEST_CLASSES
    #: URL schemes a request may have
    schemes: frozenset[str] = frozenset(DEFAULT_SCHEMES)
    #: top-level packages whose item classes a record may re-create (the spider's own)
    item_packages: frozenset[str] = frozenset()

    @classmethod
    def for_crawl(cls, spider: Spider | None, settings: Any = None) -> RecordRules:
        """Scrapy's request classes, the spider's own module and ``SCALE_FRONTIER_REQUEST_CLASSES``;
        the schemes of ``SCALE_FRONTIER_SCHEMES``."""
        names = set(SCRAPY_REQUEST_CLASSES)
        if spider is not None:
            names.add(compat.module_of(type(spider)))
        schemes: Collection[str] = DEFAULT_SCHEMES
        if settings is not None:
            names.update(frontier_settings.REQUEST_CLASSES.get(settings) or ())
            schemes = frontier_settings.SCHEMES.get(settings)
        packages = frozenset({compat.module_of(type(spider)).split(".")[0]} if spider is not None else ())
        return cls(frozenset(names), frozenset(s.lower() for s in schemes), packages)


def allowed_class(
    path: Any,
    base: type[T],
    allowed: Collection[str],
    setting: str = "SCALE_FRONTIER_REQUEST_CLASSES",
    accept: Callable[[type], bool] | None = None,
    kind: str | None = None,
) -> type[T]:
    """The class a record names at ``path`` -- THE check for every class a record may
    name: ``path``, or the module it is in, must be listed in ``allowed`` (checked on the
    string, so nothing is imported otherwise); then it is loaded and must be ``base`` or
    a subclass of it (or pass ``accept``, when given: a ``kind`` of class). Raises
    :class:`CodecError` otherwise."""
    if not isinstance(path, str) or not _DOTTED.fullmatch(path):
        raise CodecError(f"the record names a class {path!r} that is not a dotted path")
    if path not in allowed and path.rpartition(".")[0] not in allowed:
        raise CodecError(
            f"the record names class {path!r}, which the project does not allow "
            f"(not imported; list it or its module in {setting})"
        )
    try:
        obj = load_object(path)
    except (ImportError, AttributeError, NameError, ValueError) as e:
        raise CodecError(f"the record names class {path!r}, which cannot be loaded: {e}") from None
    if not (isinstance(obj, type) and (accept(obj) if accept is not None else issubclass(obj, base))):
        raise CodecError(f"the record names {path!r}, which is not a {kind or base.__name__} class")
    return obj


def item_class(path: Any, rules: RecordRules) -> type:
    """The item class a record names (in meta or cb_kwargs): a scrapy.Item, dataclass or
    attrs class of a module under the spider's own top-level package, or allowed like a
    request class (``SCALE_FRONTIER_REQUEST_CLASSES``); checked by :func:`allowed_class`."""
    allowed: Collection[str] = rules.classes
    if isinstance(path, str) and path.split(".")[0] in rules.item_packages:
        allowed = rules.classes | {path}
    return allowed_class(path, object, allowed, accept=values.is_item_class, kind="scrapy.Item/dataclass/attrs")


def spider_method(spider: Spider, name: Any, what: str = "callback") -> Callable[..., Any]:
    """The spider's method ``name``, when it may be a callback: a public method (a plain
    function on the spider's class, not an attribute, property or class method), or one
    of Scrapy's own callbacks (:data:`SCRAPY_CALLBACKS`). Raises :class:`CodecError`."""
    spidercls: Any = type(spider)
    if not isinstance(name, str) or not _may_be_callback(spidercls, name) or name in vars(spider):
        raise CodecError(f"{what} {name!r} is not a public method of the spider {spider.name!r}")
    return getattr(spider, name)  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1024)
def _may_be_callback(spidercls: type, name: str) -> bool:
    raw = inspect.getattr_static(spidercls, name, None)  # static: no property or __getattr__ runs
    if not inspect.isfunction(raw):
        return False  # not a method (an attribute, a property, a class or static method)
    if name.startswith("_"):
        return compat.module_of(raw).startswith("scrapy.") and name in SCRAPY_CALLBACKS
    return True


def check_url(url: Any, rules: RecordRules) -> None:
    """``url`` is absolute and of an allowed scheme (:attr:`RecordRules.schemes`)."""
    if not isinstance(url, str):
        raise CodecError(f"the URL {url!r} is not a string")
    scheme = urlsplit(url).scheme.lower()
    if scheme not in rules.schemes:
        allowed = ", ".join(sorted(rules.schemes))
        raise SchemeRefused(
            f"URL scheme {scheme or 'none'!r} is not allowed ({url[:200]!r}); allowed: {allowed}"
            " (SCALE_FRONTIER_SCHEMES)"
        )


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
    try:
        return _dumps({"v": VERSION, "r": _encoder(rules)(d)})
    except values.Unstorable as e:
        raise NotStorable(e.type_name, str(e)) from None


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
    if not isinstance(doc, dict) or "r" not in doc:
        raise CodecError("not a stored request (no 'r' field)")
    if doc.get("v") not in READS:
        raise CodecError(f"stored request format version {doc.get('v')!r}; this code reads {READS}")
    if not isinstance(doc["r"], dict):
        raise CodecError("not a stored request ('r' is not an object)")
    try:
        return request_from_dict(doc["r"], spider, rules)
    except CodecError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure means "cannot be rebuilt"
        raise CodecError(f"cannot rebuild the request: {type(e).__name__}: {e}") from None


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
    )


def request_from_feed(message: str | bytes, spider: Spider | None = None, rules: RecordRules | None = None) -> Request:
    """A request from a feeder's JSON message: a URL string (``"https://..."``) or an
    object with ``url`` and optionally ``callback`` (a public spider method's name),
    ``method``, ``headers``, ``body``, ``meta``, ``cb_kwargs``, ``priority``,
    ``dont_filter``. The URL's scheme must be one ``rules`` allow."""
    try:
        doc = json.loads(message)
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as e:
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
