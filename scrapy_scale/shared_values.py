"""Values read back from shared state (Redis hashes and keys, SQLite rows, files): one decoder.

Contract 5 of docs/architecture.md: whatever another process (or a person, or an attacker
with the Redis password) wrote is untrusted. Every reader of a shared hash decodes it here:

- :func:`text`: bytes to text; bytes that are not UTF-8 are refused (never replaced: a
  field name decoded with replacement characters would name another record);
- :func:`loads`: JSON with a bounded size and nesting depth, the depth found by a cheap
  scan of the brackets before :func:`json.loads` recurses (JSON nested 100,000 deep made
  it raise ``RecursionError``, which no reader expected);
- :func:`finite` / :func:`whole`: a finite number, or a whole number, within bounds;
- :func:`decode_hash`: a whole hash (field -> JSON), the fields that decode, and why the
  others were refused;
- :class:`Warnings`: one warning per key and kind of problem, not one per read (a bad
  value read back every few seconds must not flood the log).

Plain Python, no Scrapy, no other module of the package but :mod:`scrapy_scale.errors`:
every layer may use it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from scrapy_scale.errors import ScaleError

#: the deepest JSON a shared value may nest (the project's own records nest 3 deep)
MAX_DEPTH = 32
#: the largest shared value decoded, in characters (the project's own are well under 100 kB)
MAX_CHARS = 4 << 20
#: seconds before the same warning (key, kind) is given again
WARN_EVERY = 3600.0
#: warnings remembered at most (a hash of a million bad fields must not grow this)
WARN_KEYS = 1024

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


class Refused(ScaleError, ValueError):
    """A shared value that is not decoded; ``str()`` says why, in a few words."""


def text(raw: Any) -> str:
    """``raw`` (bytes, bytearray or str) as text; bytes that are not UTF-8 are refused."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes | bytearray | memoryview):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(f"not UTF-8: {bytes(raw)[:20]!r}") from None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return repr(raw)
    raise Refused(f"not text: {type(raw).__name__}")


def depth(s: str, limit: int = MAX_DEPTH) -> int:
    """How deep the brackets of JSON text ``s`` nest (strings skipped), counted up to
    ``limit + 1`` at most; no recursion, one pass."""
    if s.count("[") + s.count("{") <= limit:
        return s.count("[") + s.count("{")  # an upper bound, within the limit: cheap
    d = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub('""', s)):
        d += 1 if m.group() in "[{" else -1
        if d > deepest:
            deepest = d
            if deepest > limit:
                break
    return deepest


def loads(raw: Any, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> Any:
    """JSON read back from shared state, decoded; :class:`Refused` when it is not UTF-8,
    larger than ``max_chars``, nested deeper than ``max_depth`` or not JSON."""
    s = text(raw)
    if len(s) > max_chars:
        raise Refused(f"{len(s)} characters, more than {max_chars}")
    if depth(s, max_depth) > max_depth:
        raise Refused(f"JSON nested deeper than {max_depth}")
    try:
        return json.loads(s)
    except (ValueError, RecursionError) as e:
        raise Refused(f"not JSON ({str(e)[:60]})") from None


def finite(v: Any, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    """``v`` as a finite float within ``[lo, hi]``, else None (a bool, text that is not a
    number, NaN, an infinity, a number too large for a float, or out of bounds)."""
    if isinstance(v, bool):
        return None
    try:
        x = float(text(v) if isinstance(v, bytes | bytearray) else v)
    except (TypeError, ValueError, OverflowError, Refused):
        return None
    return x if math.isfinite(x) and lo <= x <= hi else None


def clamp(v: Any, lo: float, hi: float) -> tuple[float | None, bool]:
    """``v`` as a finite float brought within ``[lo, hi]``; (None, False) when it is not a
    finite number; the bool says it was clamped."""
    x = finite(v)
    if x is None:
        return None, False
    return min(max(x, lo), hi), not lo <= x <= hi


def whole(v: Any, lo: int, hi: int) -> int | None:
    """``v`` as an int within ``[lo, hi]`` (decimal digits, an int, or a float with no
    fraction), else None: ``"notapid"``, a 20-digit number, ``1e300``."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        n = v
    else:
        try:
            s = text(v).strip()
        except Refused:
            return None
        if not s or len(s) > 20:
            return None
        if s.lstrip("+-").isdigit():
            n = int(s)
        else:
            x = finite(s)
            if x is None or not x.is_integer():
                return None
            n = int(x)
    return n if lo <= n <= hi else None


def decode_hash(
    raw: Mapping[Any, Any], max_depth: int = MAX_DEPTH, as_json: bool = True
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A hash read back (field -> JSON text, or text when not ``as_json``): (the fields
    that decode, [(field, why) of those refused]). A field name that is not UTF-8 is
    shown with replacement characters in its ``why`` only."""
    out: dict[str, Any] = {}
    bad: list[tuple[str, str]] = []
    for k, v in raw.items():
        try:
            key = text(k)
        except Refused as e:
            shown = bytes(k).decode("utf-8", "replace") if isinstance(k, bytes | bytearray) else repr(k)
            bad.append((shown[:60], f"field name {e}"))
            continue
        try:
            out[key] = loads(v, max_depth) if as_json else text(v)
        except Refused as e:
            bad.append((key[:60], str(e)))
    return out, bad


class Warnings:
    """One warning per (key, kind) every ``every`` seconds at most, on ``logger``."""

    def __init__(self, logger: logging.Logger, every: float = WARN_EVERY, clock: Callable[[], float] = time.monotonic):
        self.logger, self.every, self.clock = logger, every, clock
        self._last: dict[tuple[str, str], float] = {}
        #: warnings given (a test or the stats can read it)
        self.given = 0

    def warn(self, key: str, kind: str, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` unless (key, kind) was warned about in the last ``every`` s."""
        now = self.clock()
        last = self._last.get((key, kind))
        if last is not None and now - last < self.every:
            return False
        if len(self._last) >= WARN_KEYS:
            self._last.clear()
        self._last[(key, kind)] = now
        self.given += 1
        self.logger.warning(msg, *args)
        return True

    def refused(self, where: str, bad: list[tuple[str, str]], what: str) -> None:
        """One warning for the refused fields of one hash (``decode_hash``'s second part)."""
        if bad:
            self.warn(
                where,
                "refused",
                "%s: skipping %d unreadable field(s) of %s (%s); shared state is untrusted",
                what,
                len(bad),
                where,
                "; ".join(f"{k!r}: {why}" for k, why in bad[:3]),
            )


def is_wrongtype(e: BaseException) -> bool:
    """A Redis error saying the key holds another type (a string where a hash should be)."""
    return "WRONGTYPE" in str(e)


__all__ = [
    "MAX_DEPTH",
    "Refused",
    "Warnings",
    "clamp",
    "decode_hash",
    "depth",
    "finite",
    "is_wrongtype",
    "loads",
    "text",
    "whole",
]
