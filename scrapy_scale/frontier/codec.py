"""Requests as data: versioned JSON from ``Request.to_dict``; never pickle.

A shared store must not become a code-execution channel, so a stored request is
plain JSON: ``{"v": 1, "r": <Request.to_dict(spider=...)>}`` with bytes written
as ``{"$b": base64}`` and dicts with non-string keys (headers) as
``{"$d": [[key, value], ...]}``. Callbacks are stored by name and looked up on
the spider when the request is rebuilt (:func:`scrapy.utils.request.request_from_dict`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import RequestFingerprinter, request_from_dict

from scrapy_scale.frontier.store import NewRequest, domain_of

#: version of the stored request format; decode() refuses others
VERSION = 1


class CodecError(ValueError):
    """A request cannot be written as data, or a stored record cannot be read back."""


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _to_json(v: Any) -> Any:
    t = type(v)
    if t in _SCALARS:  # the common case first, by exact type (subclasses take the checks below)
        return v
    if t is dict and all(type(k) is str for k in v) and "$b" not in v and "$d" not in v:
        return {k: x if type(x) in _SCALARS else _to_json(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [x if type(x) in _SCALARS else _to_json(x) for x in v]
    if isinstance(v, bytes):
        return {"$b": base64.b64encode(v).decode("ascii")}
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [_to_json(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v) and not ("$b" in v or "$d" in v):
            return {k: _to_json(x) for k, x in v.items()}
        return {"$d": [[_to_json(k), _to_json(x)] for k, x in v.items()]}
    raise CodecError(f"cannot store a value of type {type(v).__name__} in a request")


def _object_hook(d: dict[str, Any]) -> Any:
    """``json.loads`` hook: called bottom-up on each JSON object as it is parsed (so the
    values inside are already decoded); turns the two markers back into bytes / a dict
    with non-string keys, with no Python-level walk over every list and string."""
    if len(d) == 1:
        if "$b" in d:
            if not isinstance(d["$b"], str):
                raise CodecError(f"cannot rebuild the request: a bytes marker holds {type(d['$b']).__name__}")
            return base64.b64decode(d["$b"])
        if "$d" in d:
            try:
                return {_hashable(k): x for k, x in d["$d"]}
            except (TypeError, ValueError) as e:
                raise CodecError(f"cannot rebuild the request: a dict marker: {e}") from None
    return d


def _hashable(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def encode(request: Request, spider: Spider | None = None) -> str:
    """The request as versioned JSON. Raises :class:`CodecError` when a value
    (in meta, cb_kwargs...) is not plain data, or a callback is not a spider method."""
    try:
        d = request.to_dict(spider=spider)
    except ValueError as e:  # callback not found on the spider
        raise CodecError(str(e)) from None
    return _dumps({"v": VERSION, "r": _to_json(d)})


#: ``json.dumps(..., separators=(",", ":"))`` without building an encoder per call (same output)
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def decode(data: str, spider: Spider | None = None) -> Request:
    """Rebuild the request. Raises :class:`CodecError` with the reason when the
    record cannot be read (bad JSON, unknown version, missing callback...)."""
    try:
        doc = _loads(data) if isinstance(data, str) else json.loads(data, object_hook=_object_hook)
    except CodecError:
        raise
    except (json.JSONDecodeError, TypeError) as e:
        raise CodecError(f"not JSON: {e}") from None
    except Exception as e:  # noqa: BLE001 - a marker that is not what it says ({"$b": 1}, bad base64...)
        raise CodecError(f"cannot rebuild the request: {type(e).__name__}: {e}") from None
    if not isinstance(doc, dict) or "r" not in doc:
        raise CodecError("not a stored request (no 'r' field)")
    if doc.get("v") != VERSION:
        raise CodecError(f"stored request format version {doc.get('v')!r}; this code reads {VERSION}")
    try:
        return request_from_dict(doc["r"], spider=spider)
    except Exception as e:  # noqa: BLE001 - any failure means "cannot be rebuilt"
        raise CodecError(f"cannot rebuild the request: {type(e).__name__}: {e}") from None


_loads = json.JSONDecoder(object_hook=_object_hook).decode


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
) -> NewRequest:
    """A seed (URL or Request) as a :class:`NewRequest` (dedup on, no update)."""
    request = Request(r) if isinstance(r, str) else r
    fp = fingerprint or default_fingerprint(request)
    return NewRequest(
        fingerprint=fp,
        data=encode(request, spider),
        domain=domain_of(request.url),
        priority=request.priority if priority is None else priority,
    )


def request_from_feed(message: str | bytes, spider: Spider | None = None) -> Request:
    """A request from a feeder's JSON message: a URL string (``"https://..."``) or an
    object with ``url`` and optionally ``callback`` (method name), ``method``,
    ``headers``, ``body``, ``meta``, ``cb_kwargs``, ``priority``, ``dont_filter``."""
    try:
        doc = json.loads(message)
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as e:
        raise CodecError(f"feed message is not JSON: {e}") from None
    if isinstance(doc, str):
        doc = {"url": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        raise CodecError("feed message must be a URL string or an object with a 'url'")
    allowed = {"url", "callback", "errback", "method", "headers", "body", "meta", "cb_kwargs",
               "priority", "dont_filter", "cookies", "flags", "encoding"}
    unknown = set(doc) - allowed
    if unknown:
        raise CodecError(f"feed message has unknown fields: {', '.join(sorted(unknown))}")
    try:
        return request_from_dict(doc, spider=spider)
    except Exception as e:  # noqa: BLE001
        raise CodecError(f"feed message cannot be a request: {type(e).__name__}: {e}") from None
