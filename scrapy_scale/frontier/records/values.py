"""The values a stored request may carry (format 2): JSON plus tagged objects, never pickle.

Format 1 knew two tags: ``{"$b": base64}`` (bytes) and ``{"$d": [[k, v], ...]}`` (a dict
with non-string keys). Format 2 adds the values spiders commonly put in ``meta`` and
``cb_kwargs``, each a one-key object:

==============  ====================================================
``$t``          tuple (a list of its values)
``$set``        set; ``$fset`` frozenset (lists of their values)
``$dt``         datetime.datetime (ISO 8601, with its UTC offset if any)
``$date``       datetime.date; ``$time`` datetime.time (ISO 8601)
``$td``         datetime.timedelta (``[days, seconds, microseconds]``)
``$dec``        decimal.Decimal (its string)
``$item``       a scrapy.Item, dataclass or attrs instance: ``[class path, {field: value}]``
==============  ====================================================

A plain dict that has a key spelled like a tag is written as ``$d``, so user data
never reads back as a tag. Item classes are looked up through
:func:`scrapy_scale.frontier.records.codec.item_class` -- the one place a record's class
names are checked -- so a record can only re-create an item class the project allows.
Anything else (an open file, a lambda, a spider...) raises :class:`Unstorable`,
naming the value's type.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
from collections.abc import Callable
from typing import Any

from scrapy_scale import compat
from scrapy_scale.errors import ScaleError

#: one-key objects that mean a tagged value in format 2
TAGS = frozenset({"$b", "$d", "$t", "$set", "$fset", "$dt", "$date", "$time", "$td", "$dec", "$item"})
_V1_TAGS = frozenset({"$b", "$d"})
_SCALARS = frozenset({str, int, float, bool, type(None)})


class Unstorable(ScaleError, ValueError):
    """A value that cannot be stored as data; ``type_name`` names its type."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


def item_fields(v: Any) -> dict[str, Any] | None:
    """The fields of an item object (scrapy.Item, dataclass or attrs instance) that its
    class takes back as keyword arguments; None when ``v`` is not one."""
    from scrapy import Item

    if isinstance(v, Item):
        return dict(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if f.init}
    attrs_fields = getattr(type(v), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return {getattr(a, "alias", None) or a.name.lstrip("_"): getattr(v, a.name) for a in attrs_fields if a.init}
    return None


def is_item_class(cls: type) -> bool:
    from scrapy import Item

    return isinstance(cls, type) and (
        issubclass(cls, Item) or dataclasses.is_dataclass(cls) or hasattr(cls, "__attrs_attrs__")
    )


def class_path(cls: type) -> str:
    return compat.qualified_name(cls)


class Encoder:
    """Values to JSON-able data (format 2). ``check_item_class(path)`` raises when a
    record could not re-create that class (so such a request is never written)."""

    def __init__(self, check_item_class: Callable[[str], object]):
        self.check_item_class = check_item_class

    def __call__(self, v: Any) -> Any:
        t = type(v)
        if t in _SCALARS:  # the common case first, by exact type
            return v
        if t is dict:
            if all(type(k) is str for k in v) and TAGS.isdisjoint(v):
                return {k: x if type(x) in _SCALARS else self(x) for k, x in v.items()}
            return {"$d": [[self(k), self(x)] for k, x in v.items()]}
        if t is list:
            return [x if type(x) in _SCALARS else self(x) for x in v]
        if t is tuple:
            return {"$t": [self(x) for x in v]}
        return self._other(v)

    def _other(self, v: Any) -> Any:
        if isinstance(v, bytes):
            return {"$b": base64.b64encode(v).decode("ascii")}
        if isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, set | frozenset):
            return {"$fset" if isinstance(v, frozenset) else "$set": [self(x) for x in v]}
        if isinstance(v, datetime.datetime):
            return {"$dt": v.isoformat()}
        if isinstance(v, datetime.date):
            return {"$date": v.isoformat()}
        if isinstance(v, datetime.time):
            return {"$time": v.isoformat()}
        if isinstance(v, datetime.timedelta):
            return {"$td": [v.days, v.seconds, v.microseconds]}
        if isinstance(v, decimal.Decimal):
            return {"$dec": str(v)}
        fields = item_fields(v)
        if fields is not None:
            cls = type(v)
            if "." in cls.__qualname__ or "<" in cls.__qualname__:
                raise Unstorable(
                    cls.__name__,
                    f"cannot store a {cls.__name__}: a class nested in a function or class cannot be looked up again",
                )
            path = class_path(cls)
            try:
                self.check_item_class(path)
            except ValueError as e:
                raise Unstorable(cls.__name__, f"cannot store a {cls.__name__}: {e}") from None
            return {"$item": [path, {k: self(x) for k, x in fields.items()}]}
        if isinstance(v, list | tuple | dict):  # subclasses of the containers
            return self(list(v) if isinstance(v, list) else tuple(v) if isinstance(v, tuple) else dict(v))
        name = type(v).__name__
        raise Unstorable(name, f"cannot store a value of type {name} in a request")


def _hashable(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _hook(tags: frozenset[str], load_item_class: Callable[[str], type] | None) -> Callable[[dict[str, Any]], Any]:
    def hook(d: dict[str, Any]) -> Any:
        if len(d) == 1:
            (tag,) = d
            if tag in tags:
                return _untag(tag, d[tag], load_item_class)
        return d

    return hook


#: format 1's ``json.loads`` object hook (only ``$b`` and ``$d``)
v1_hook = _hook(_V1_TAGS, None)


def v2_hook(load_item_class: Callable[[str], type]) -> Callable[[dict[str, Any]], Any]:
    """Format 2's object hook; item classes come from ``load_item_class(path)``."""
    return _hook(TAGS, load_item_class)


def _untag(tag: str, x: Any, load_item_class: Callable[[str], type] | None) -> Any:
    """Called bottom-up by json.loads: ``x`` is already decoded. Raises ValueError/TypeError
    (the caller reports the record as unreadable)."""
    if tag == "$b":
        if not isinstance(x, str):
            raise TypeError(f"a bytes marker holds {type(x).__name__}")
        return base64.b64decode(x)
    if tag == "$d":
        return {_hashable(k): v for k, v in x}
    if tag == "$t":
        return tuple(x)
    if tag == "$set":
        return {_hashable(v) for v in x}
    if tag == "$fset":
        return frozenset(_hashable(v) for v in x)
    if tag == "$dt":
        return datetime.datetime.fromisoformat(x)
    if tag == "$date":
        return datetime.date.fromisoformat(x)
    if tag == "$time":
        return datetime.time.fromisoformat(x)
    if tag == "$td":
        return datetime.timedelta(*x)
    if tag == "$dec":
        return decimal.Decimal(x)
    assert tag == "$item" and load_item_class is not None
    path, fields = x
    if not isinstance(fields, dict):
        raise TypeError("an item marker holds no fields")
    return load_item_class(path)(**fields)
