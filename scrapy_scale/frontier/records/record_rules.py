"""What a stored record or a feed message may name, and the one check for each name.

:class:`RecordRules` (classes, URL schemes, item packages), :func:`allowed_class` (THE
check for every class a record names, on the dotted path before anything is imported),
:func:`item_class`, :func:`spider_method` (callbacks) and :func:`check_url`. The codec
(:mod:`.codec`) applies them on encode and decode; see its docstring for why.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from scrapy import Spider
from scrapy.utils.misc import load_object

from scrapy_scale import compat
from scrapy_scale.errors import ScaleError
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier.records import values


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
