"""Request.meta keys that scrapy-scale reads and writes. One place, so they stay consistent."""

import time
from itertools import islice

#: attempts made so far for this request, 1 for the first download
ATTEMPT = "scale_attempt"
#: epoch seconds before which the request must not be downloaded (a retry's backoff)
NOT_BEFORE = "scale_not_before"
#: egress ids this request must not go through (after egress failures or blocks)
AVOID_EGRESS = "scale_avoid_egress"
#: the egress id the request went through (set by the egress pool, or by the user)
EGRESS = "scale_egress"
#: hex request fingerprint, cached at enqueue so later components agree on it
FINGERPRINT = "scale_fingerprint"
#: True when the callback is expected to yield at least one item
EXPECT_ITEMS = "scale_expect_items"
#: class and reason of the previous attempt's failure, for the next attempt's outcome
LAST_FAILURE = "scale_last_failure"

#: late retries (SCALE_RETRY_LATE) made so far in this request's chain
LATE = "scale_late"
#: epoch seconds of the chain's first failure (the late retries' deadline counts from it)
FIRST_FAILED = "scale_first_failed"

#: the chain's failed attempts per failure class, ``{class: count}``: each class's budget counts
#: its own attempts only. An attempt that failed at the egress (``egress_failed``, no answer
#: through an unproven egress, a block only its route gets) never reached the site, or says
#: nothing about the page: it counts under ``egress_failed``. A page that met two random 503s,
#: a 403 through the one proxy its site denies and a dead proxy was given up as blocked when
#: every class's budget counted the whole chain (the real plan of the chaos benchmark: a
#: listing's 175-page subtree lost)
CLASS_FAILURES = "scale_class_failures"

#: True for an attempt through an egress that has not proved itself (a re-probe out of
#: quarantine, or no answer through it yet while others answered): a failure without an
#: answer is then retried as an egress failure (the outcome stays ``transient``: the egress
#: pool blames the egress only with evidence). One attempt's: set or removed by the egress
#: middleware at every assignment, set by the first-byte timeout on an attempt it cut under
#: an unproven egress's bound, removed when the request goes back to the scheduler
EGRESS_PROBE = "scale_egress_probe"

#: the egress id whose route the site refused the previous attempt through for the rate (a 429,
#: a 503 with or without Retry-After): the retry does not go at once through a sibling route at
#: the pace that was refused (scrapy_scale/throttle/routing.py ``RouteLearner.crowded``). Kept
#: with the chain (``EGRESS`` is an attempt's, removed when the request goes back to the scheduler)
REFUSED_VIA = "scale_refused_via"

#: the keys that make a request the next attempt of its chain; a request that copied
#: them from another (``meta=dict(response.meta)``) starts a chain of its own without them
CHAIN_KEYS = (
    ATTEMPT,
    NOT_BEFORE,
    LAST_FAILURE,
    AVOID_EGRESS,
    LATE,
    FIRST_FAILED,
    CLASS_FAILURES,
    REFUSED_VIA,
    "retry_times",
)

#: the most attempts a chain can plausibly have; a stored value above it is not trusted
MAX_ATTEMPT = 10_000

#: a request whose not-before is at most this far ahead is due (clock granularity)
NOT_BEFORE_TOLERANCE = 0.002
#: a not-before further ahead than this (seconds) was written by no component (the longest
#: wait is a clamped ``Retry-After`` or a late retry, minutes): not trusted, dropped
NOT_BEFORE_FAR = 86_400.0

#: set by the egress pool on a request it lets pass without an egress because its
#: not-before time has not come: the outcome middleware's not-before guard holds it back
#: whatever its own clock says a moment later, so it never leaves without an egress (internal)
HOLD_BACK = "_scale_hold_back"

_warned_attempt = False


def attempt_of(m: dict, default: int = 1) -> int:
    """The chain's attempt number from ``m`` (a request's meta, possibly read back from a
    stored record: untrusted). A value that is not a whole number from 1 to
    :data:`MAX_ATTEMPT` (text, NaN, infinite, negative, huge) gives ``default``, with one
    warning per process, instead of an exception on the request path."""
    global _warned_attempt
    raw = m.get(ATTEMPT, default)
    try:
        value = float(raw)
        if value != value or not 1 <= value <= MAX_ATTEMPT:
            raise ValueError(raw)
        return int(value)
    except (TypeError, ValueError, OverflowError):
        if not _warned_attempt:
            _warned_attempt = True
            import logging

            logging.getLogger(__name__).warning(
                "request meta %s = %r is not an attempt number; counted as %d (warned once)", ATTEMPT, raw, default
            )
        return default


_warned_keys: set[str] = set()


def _warn_once(key: str, raw: object, what: str) -> None:
    if key not in _warned_keys:
        _warned_keys.add(key)
        import logging

        logging.getLogger(__name__).warning("request meta %s = %.200r %s (warned once)", key, raw, what)


def class_failures_of(m: dict, attempt: int, known: frozenset[str]) -> dict[str, int] | None:
    """The chain's failed attempts per class from ``m`` (untrusted, as :func:`attempt_of`):
    ``{class: count}`` for the class names in ``known``, or None when ``m`` has no such dict
    (a chain begun before the key existed, or a stored value that is not a dict, with one
    warning: every earlier attempt then counts in the budget of the class decided, the
    stricter reading). An entry whose name is not in ``known`` or whose count is not an
    integer is skipped, a count below 0 is taken as 0 and one above the chain's earlier
    attempts (``attempt - 1``) as that many; each with one warning per process."""
    raw = m.get(CLASS_FAILURES)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        _warn_once(CLASS_FAILURES, raw, "is not a dict of failed attempts per class; every earlier attempt counted")
        return None
    top = max(0, attempt - 1)
    out: dict[str, int] = {}
    bad = False
    for name, n in islice(raw.items(), len(known) + 1):  # a huge dict is not read through
        if name not in known or isinstance(n, bool) or not isinstance(n, int):
            bad = True
            continue
        out[name] = min(max(n, 0), top)
        bad = bad or out[name] != n
    if bad or len(raw) > len(known):
        _warn_once(
            CLASS_FAILURES, raw, f"holds counts that cannot be true of attempt {attempt}; clamped to 0-{top} per class"
        )
    return out


def not_before_of(m: dict, now: float | None = None) -> float | None:
    """The request's not-before time from ``m`` (a request's meta, possibly read back from
    a stored record: untrusted), or None when it has none. A value that is not a finite
    number of epoch seconds, or is more than :data:`NOT_BEFORE_FAR` ahead, is removed from
    ``m`` (the request is due), with one warning per process, instead of an exception on
    the request path or a page that waits for ever."""
    raw = m.get(NOT_BEFORE)
    if raw is None:
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
        if value == value and value <= (time.time() if now is None else now) + NOT_BEFORE_FAR:
            return value
        what = "is not a time that close (a finite number of epoch seconds, less than a day ahead); dropped"
    else:
        what = "is not a time (epoch seconds); dropped"
    del m[NOT_BEFORE]
    _warn_once(NOT_BEFORE, raw, what)
    return None


def avoid_of(m: dict) -> tuple[str, ...]:
    """The egress ids the request must avoid from ``m`` (untrusted, as :func:`not_before_of`):
    a list or tuple of strings; anything else is removed from ``m`` (nothing avoided) and
    an entry that is not a string skipped, with one warning per process."""
    raw = m.get(AVOID_EGRESS)
    if not raw:
        return ()
    if isinstance(raw, list | tuple):
        ids = tuple(x for x in raw if isinstance(x, str))
        if len(ids) == len(raw):
            return ids
        m[AVOID_EGRESS] = list(ids)
        _warn_once(AVOID_EGRESS, raw, "holds values that are not egress ids; they are skipped")
        return ids
    del m[AVOID_EGRESS]
    _warn_once(AVOID_EGRESS, raw, "is not a list of egress ids; dropped")
    return ()


def check_stored(m: dict) -> None:
    """Check the chain keys of a request rebuilt from a stored record (shared state:
    untrusted), where it is read back: a bad value is dropped or counted as its default
    with one warning per process (:func:`not_before_of`, :func:`avoid_of`, :func:`attempt_of`)."""
    not_before_of(m)
    avoid_of(m)
    refused_via(m)
    if ATTEMPT in m and attempt_of(m, 0) == 0:
        del m[ATTEMPT]


def refused_via(m: dict) -> str | None:
    """The egress a retry's page was last refused through for the rate (``REFUSED_VIA``), from
    ``m`` (untrusted: anything but a non-empty string is removed from ``m``, with one warning
    per process)."""
    raw = m.get(REFUSED_VIA)
    if raw is None:
        return None
    if isinstance(raw, str) and raw:
        return raw
    del m[REFUSED_VIA]
    _warn_once(REFUSED_VIA, raw, "is not an egress id; the retry is paced as any request")
    return None
