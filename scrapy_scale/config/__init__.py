"""SCALE_* settings: one registry, read and validated once at startup.

Every component declares its settings here with :func:`declare` (name, default,
parser, one line of documentation). :func:`get` reads one setting through its
parser; a bad value raises :class:`ScaleSettingError` naming the setting and what
is wrong, so the crawl fails at startup instead of misbehaving later.

docs/settings.md is generated from this registry (reference.py); the tests check both agree.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapy.settings import BaseSettings

from scrapy_scale.errors import ScaleError
from scrapy_scale.redact import redact_text, redact_value

PREFIX = "SCALE_"


_NO_VALUE: Any = object()


class ScaleSettingError(ScaleError, ValueError):
    """A SCALE_* setting has a value that cannot be used.

    ``value``, when given, is the value as set (kept redacted: a URL's password, a
    secret-looking key's value never reach the log)."""

    def __init__(self, name: str, problem: str, value: Any = _NO_VALUE):
        self.setting = name
        self.problem = redact_text(problem)  # a bad URL's password stays out of the log
        self.value: str | None = None if value is _NO_VALUE else redact_value(value)
        got = f" (got {self.value})" if self.value is not None else ""
        super().__init__(f"{name}: {self.problem}{got}")

    def line(self) -> str:
        """The error as one line for the log: setting, value, what is wrong."""
        shown = f" = {self.value}" if self.value is not None else ""
        return f"bad setting {self.setting}{shown}: {self.problem}"


Parser = Callable[[Any], Any]


@dataclass(frozen=True)
class Setting:
    """A declared setting. Read it with :meth:`get` (``frontier_settings.BATCH.get(crawler.settings)``):
    the one way settings are read, so a name is never spelled twice."""

    name: str
    default: Any
    parse: Parser
    doc: str
    component: str
    #: the parser for commands that only read state: checks the value's shape without
    #: opening what it names (a file, a provider class); None: ``parse``
    shallow: Parser | None = None

    def get(self, settings: BaseSettings | Mapping[str, Any]) -> Any:
        """The parsed value (the default when unset); ScaleSettingError names the setting."""
        return get(settings, self.name)


REGISTRY: dict[str, Setting] = {}


def declare(name: str, default: Any, parse: Parser, doc: str, component: str, shallow: Parser | None = None) -> Setting:
    """Register a setting. Declaring the same name twice with another default is a bug.
    ``shallow``: the parser :func:`validate_all` uses with ``read_sources=False``."""
    if not name.startswith(PREFIX):
        raise ValueError(f"setting {name!r} must start with {PREFIX}")
    old = REGISTRY.get(name)
    if old is not None and (old.default != default or old.component != component):
        raise ValueError(f"setting {name} declared twice")
    s = Setting(name, default, parse, doc, component, shallow)
    REGISTRY[name] = s
    return s


def get(settings: BaseSettings | Mapping[str, Any], name: str, shallow: bool = False) -> Any:
    """The parsed value of a declared setting (its default when unset). ``shallow``:
    through the setting's shallow parser when it has one (what it names is not opened)."""
    s = REGISTRY[name]
    raw = settings.get(name, None)
    if raw is None:
        raw = s.default
    if raw is None:
        return None
    parse = s.shallow if shallow and s.shallow is not None else s.parse
    try:
        return parse(raw)
    except ScaleSettingError:
        raise
    except (TypeError, ValueError) as e:
        raise ScaleSettingError(name, str(e), raw) from None


def validate_all(settings: BaseSettings | Mapping[str, Any], read_sources: bool = True) -> dict[str, Any]:
    """Parse every declared setting and reject unknown SCALE_* names (typos).
    ``read_sources=False`` (commands that only read state): a setting that names a
    source (an egress file, a provider class) is checked for its shape, not opened."""
    load_declarations()
    values = {name: get(settings, name, shallow=not read_sources) for name in sorted(REGISTRY)}
    names: Iterable[str] = settings.keys() if hasattr(settings, "keys") else []
    for key in names:
        if isinstance(key, str) and key.startswith(PREFIX) and key not in REGISTRY:
            near = difflib.get_close_matches(key, list(REGISTRY), n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise ScaleSettingError(key, f"unknown setting{hint}", settings.get(key))
    return values


def load_declarations() -> None:
    """Import every module that declares settings, so the registry is complete: call it
    before reading REGISTRY whole (validate_all, the settings reference, the add-on do)."""
    import importlib

    for mod in DECLARING_MODULES:
        try:
            importlib.import_module(mod)
        except ImportError as e:  # an optional extra is missing; its settings stay undeclared
            if e.name and e.name.startswith("scrapy_scale"):
                raise


# Modules that call declare(); each package adds its own settings module here.
DECLARING_MODULES: list[str] = [
    "scrapy_scale.config.core_settings",
    "scrapy_scale.outcomes.settings",
    "scrapy_scale.frontier.settings",
    "scrapy_scale.storage.settings",
    "scrapy_scale.throttle.settings",
    "scrapy_scale.quality.settings",
    "scrapy_scale.monitor.settings",
    "scrapy_scale.egress.settings",
]


# ---- parsers -------------------------------------------------------------------


def as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(v, str) and v.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected a boolean (True/False)")


def as_int(lo: int | None = None, hi: int | None = None) -> Parser:
    def parse(v: Any) -> int:
        if isinstance(v, bool):
            raise ValueError("expected an integer")
        if isinstance(v, float) and not v.is_integer():
            raise ValueError("expected an integer")
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ValueError("expected an integer") from None
        _check_range(n, lo, hi)
        return n

    return parse


def as_float(lo: float | None = None, hi: float | None = None) -> Parser:
    def parse(v: Any) -> float:
        if isinstance(v, bool):
            raise ValueError("expected a number")
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise ValueError("expected a number") from None
        if x != x:
            raise ValueError("expected a number, got NaN")
        if x in (math.inf, -math.inf):
            raise ValueError("expected a finite number")  # e.g. a cap or a time in seconds
        _check_range(x, lo, hi)
        return x

    return parse


def _check_range(x: float, lo: float | None, hi: float | None) -> None:
    if lo is not None and x < lo:
        raise ValueError(f"must be >= {lo}")
    if hi is not None and x > hi:
        raise ValueError(f"must be <= {hi}")


def as_str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("expected a string")
    return v


def as_choice(*choices: str) -> Parser:
    def parse(v: Any) -> str:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return str(v)

    return parse


def as_url(*schemes: str) -> Parser:
    """A URL whose scheme is one of ``schemes`` (e.g. ``sqlite``, ``redis``)."""

    def parse(v: Any) -> str:
        if not isinstance(v, str) or "://" not in v:
            raise ValueError(f"expected a URL such as {schemes[0]}://...")
        scheme = urlsplit(v).scheme
        if scheme not in schemes:
            raise ValueError(f"unknown URL scheme {scheme!r}; supported: {', '.join(s + '://' for s in schemes)}")
        return v

    return parse


def as_json_value(v: Any) -> Any:
    """Accept a dict/list, or a JSON string of one (for -s on the command line)."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON: {e.msg}") from None
    return v


def as_list(item: Parser | None = None) -> Parser:
    def parse(v: Any) -> list[Any]:
        v = as_json_value(v) if isinstance(v, str) and v.strip().startswith("[") else v
        if isinstance(v, str):
            v = [p.strip() for p in v.split(",") if p.strip()]
        if not isinstance(v, list | tuple | set | frozenset):
            raise ValueError("expected a list")
        return [item(x) if item else x for x in v]

    return parse


def as_dict(v: Any) -> dict[str, Any]:
    v = as_json_value(v)
    if hasattr(v, "copy_to_dict"):
        v = v.copy_to_dict()
    if not isinstance(v, Mapping):
        raise ValueError("expected a dict")
    return dict(v)
