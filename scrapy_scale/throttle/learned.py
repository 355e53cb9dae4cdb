"""A site's learned pacing as read back from shared state (a file, Redis): checked.

What is read back is untrusted input: a value that is not a finite number, negative, or
far in the future is repaired or not used, and the caller warns once.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from scrapy_scale.shared_values import finite as as_finite
from scrapy_scale.throttle.paces import Paces, check_paces, export_paces, rate_tied

#: seconds a time read back from shared state may be ahead of ours (clocks of workers differ)
FUTURE_SLACK = 60.0


class LearnedRecord(TypedDict, total=False):
    """A site's or a route's (``"<site> via <egress>"``) learned pacing as stored in shared
    state (Redis or ``throttle.db``, JSON). Written by :func:`export_state` only and read
    back by :func:`check_learned` only (the one decoder: the workers' restore and
    `scrapy scale status` go through it). Fields missing from an older record read as
    their defaults."""

    delay: float
    too_fast: float
    too_fast_at: float
    proven: float
    settled: float
    fastest_ok: float
    #: answers by pace: bucket -> [answers, refusals] (throttle/paces.py)
    paces: dict[str, list[float]]
    #: when it was learned
    at: float
    #: paused by a Retry-After until then (0: not paused); shown by status, not restored
    paused_until: float


class LearnedState(TypedDict):
    """A :class:`LearnedRecord` read back and checked (:func:`check_learned`)."""

    paces: Paces
    delay: float
    at: float
    too_fast: float
    too_fast_at: float
    proven: float
    settled: float
    fastest_ok: float
    #: None when the stored value is not a finite time (status warns about it)
    paused_until: float | None


def check_learned(raw: Any, now: float, max_spacing: float = math.inf) -> tuple[LearnedState | None, str | None]:
    """A site's learned state as read back from shared state (a file, Redis), checked.

    Returns ``(state, None)`` when usable; ``(state, why)`` when something was repaired
    (a time in the future is brought back to ``now``, an unusable too-fast or proven
    spacing is dropped: not a finite number, negative, or above ``max_spacing``, the
    profile's ``max_delay``, which would pin the site at ``max_delay`` for days while the
    memory fades); ``(None, why)`` when the delay or its time is missing, not a number,
    infinite, NaN, negative or above ``max_spacing``: the state is not used at all."""
    if not isinstance(raw, dict):
        return None, f"not a record: {str(raw)[:40]!r}; not used"
    delay, at = as_finite(raw.get("delay")), as_finite(raw.get("at"))
    if delay is None or delay < 0:
        return None, f"delay {raw.get('delay')!r} is not a finite number of seconds; not used"
    if delay > max_spacing:
        # as the learned spacings above max_delay below: a huge finite delay (1e6 s) would
        # be clamped to max_delay and pin the site there, silently (issue 35 item 3)
        return None, f"delay {delay:.6g} s is above max_delay {max_spacing:g} s; not used"
    if at is None:
        return None, f"time {raw.get('at')!r} is not a finite time; not used"
    why = None
    if at > now + FUTURE_SLACK:
        why, at = f"time {at:.0f} is in the future; taken as now", now
    tf, tf_at = as_finite(raw.get("too_fast", 0.0)), as_finite(raw.get("too_fast_at", at))
    if tf is None or tf < 0 or tf_at is None:
        why, tf, tf_at = why or f"too-fast spacing {raw.get('too_fast')!r} is unusable; dropped", 0.0, 0.0
    elif tf > max_spacing:
        why, tf, tf_at = why or f"too-fast spacing {tf:.6g} s is above max_delay {max_spacing:g} s; dropped", 0.0, 0.0
    elif tf_at > now:
        tf_at = now  # its memory would never fade
    proven = as_finite(raw.get("proven", 0.0))
    if proven is None or proven < 0:
        why, proven = why or f"proven spacing {raw.get('proven')!r} is unusable; dropped", 0.0
    elif proven > max_spacing:
        why, proven = why or f"proven spacing {proven:.6g} s is above max_delay {max_spacing:g} s; dropped", 0.0
    settled = as_finite(raw.get("settled", tf))  # older records: all of it confirmed
    if settled is None or settled < 0:
        why, settled = why or f"confirmed spacing {raw.get('settled')!r} is unusable; all confirmed", tf
    fastest = as_finite(raw.get("fastest_ok", 0.0))
    if fastest is None or fastest < 0 or fastest > max_spacing:
        why, fastest = why or f"fastest good spacing {raw.get('fastest_ok')!r} is unusable; dropped", 0.0
    by_pace, paces_why = check_paces(raw.get("paces"))
    why = why or paces_why
    state = LearnedState(
        paces=by_pace,
        delay=delay,
        at=at,
        too_fast=tf,
        too_fast_at=tf_at,
        proven=proven,
        settled=settled,
        fastest_ok=fastest,
        paused_until=as_finite(raw.get("paused_until", 0.0)),
    )
    return state, why


def export_state(pacing: Any, since: float = 0.0) -> dict[str, LearnedRecord]:
    """The learned state of sites changed after ``since``, as stored (the one encoder of
    :class:`LearnedRecord`)."""
    return {
        k: LearnedRecord(
            delay=s.delay,
            too_fast=s.too_fast,
            too_fast_at=s.too_fast_at,
            proven=s.proven,
            settled=s.settled,
            fastest_ok=s.fastest_ok,
            paces=export_paces(s.paces),
            at=s.changed_at,
            # for `scrapy scale status` / `watch` (which sites are paused, until when);
            # restore() does not adopt it: a pause is shared by the limiter, if at all
            paused_until=s.paused_until,
        )
        for k, s in pacing.sites.items()
        if (s.learned and s.changed_at > since) or s.paused_at > since
    }


def restore_state(pacing: Any, learned: dict[str, dict[str, Any]]) -> int:
    """Adopt learned state that is newer than ours (a restart, another worker). Returns how many.

    What is read back is checked first (:func:`check_learned`); a site whose state is
    unusable keeps its profile's pacing and is marked changed, so that the next save
    writes sane state over the bad one. Each problem is added to :attr:`rejected`. A learned
    spacing the answers by pace do not back (:func:`~scrapy_scale.throttle.paces.rate_tied`,
    strict) is not carried over: the site starts from its profile."""
    n = 0
    now = pacing.clock()
    for key, raw in learned.items():
        s = pacing.site(key)
        v, why = check_learned(raw, now, s.profile.max_delay)
        if why is not None:
            pacing.rejected.append((key, why))
        if s.key != key:
            continue
        if v is None:
            s.learned, s.changed_at = True, max(s.changed_at, now)
            continue
        if v["at"] <= s.changed_at:
            continue
        s.delay = pacing._bound(s, v["delay"])
        s.too_fast, s.too_fast_at, s.proven = v["too_fast"], v["too_fast_at"], v["proven"]
        # what was stepped up to in an earlier run is no pace of this one: only the confirmed
        # part can be confirmed again (a stray 429 of the next run must not confirm it all)
        s.settled = min(v["settled"], s.too_fast)
        s.paces = v["paces"]
        if s.settled and rate_tied(s.paces, s.settled, at_slower=True, strict=True) is False:
            # the answers by pace do not back it: the site refused as often at that spacing
            # and slower as faster (refusals tied to paths, planned faults), so none of it
            # is confirmed and none of it is carried into this run: the delay starts again
            # from the profile (a real limit is learned again at the cost of one refusal)
            s.settled = s.too_fast = 0.0
            s.delay = pacing._bound(s, s.profile.start_delay)
        s.peak = s.settled
        s.fastest_ok = v["fastest_ok"]
        s.learned, s.changed_at = True, v["at"]
        n += 1
    return n
