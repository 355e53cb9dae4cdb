"""Per-site pacing decisions: the adaptive delay, Retry-After pauses, the local gate.

The rules of :class:`~scrapy_scale.throttle.pacing.Pacing` (their constants, and the
pure rules on one site's state). Plain Python with an injectable clock (epoch seconds);
no reactor, no Scrapy. The Scrapy glue (:mod:`scrapy_scale.throttle.throttle`) feeds it
outcomes and asks it, for each request the scheduler is about to hand out, whether the
request's site is due.

The delay of a site (seconds between two requests to it):

- **latency** (as AutoThrottle): the goal is ``latency / target_concurrency``; a
  slower answer raises the delay to it at once;
- **rate limited** (``rate_limited`` outcomes, fast 429s included): the delay is
  multiplied by ``slowdown`` (from at least the spacing the site just complained
  about), at most once per burst (answers to requests sent before the last
  slow-down do not slow it down again); the spacing that was too fast is
  remembered. At the pace learned to be safe, a refusal is one small step
  (:data:`MARGIN`) instead;
- **stray refusals are forgiven, repeated ones are not**: while refusals are under
  :data:`SMALL_SHARE` of the recent answers, an isolated refusal at a pace proven by
  :data:`PROVEN_AFTER_GOOD` good answers in a row (none in the last
  :data:`STEP_AFTER_GOOD` answers, no other forgiven in the last :data:`FORGIVE_EVERY`,
  the answers by pace not tying refusals to the rate) is no step, and neither is the
  refusal of the first request after a Retry-After pause (once per pause). A forgiven
  refusal still stops the delay from going lower. Every step clears the proven pace;
- **after a run of good answers** a refusal steps up from the spacing sent since the
  previous refusal, pauses included (a bucket that let the run through took that rate),
  when it is slower than the spacing refused at (at most :data:`CYCLE_CAP` times);
- **a bucket's beat** (routes only: :class:`~scrapy_scale.throttle.routing.RoutePacing`):
  when a route's last two cycles between refusals (each after :data:`PROVEN_AFTER_GOOD`
  good answers or more, pauses included) sent at spacings within :data:`BEAT` of each
  other, slower than the spacing refused by more than :data:`MARGIN`, and the answers by
  pace do not deny that refusals are the rate's, the step takes that spacing (at most
  ``slowdown`` times the refused one) and it is confirmed at once: a bucket that refuses
  at a steady beat took that rate. nginx's ``limit_req`` with ``burst=2`` and
  ``Retry-After: 1`` refused each route of the real plan in cycles of 0.32-0.334 s
  against its 3/s, while the spacing it refused at was 0.2-0.28 s. A site's own pacing
  (no egresses) keeps the rules below alone: the demo's planned faults come at random, and
  their long cycles, pause included, agree by chance;
- **unconfirmed steps** (:mod:`scrapy_scale.throttle.paces` for the answers by pace) are
  confirmed when the site refuses again below them after good answers, or when the step
  came after a long run of good answers, unless the answers by pace say slowing down did
  not lower the refusals; else they fade once :data:`STEPS_FADE_AFTER` good answers come
  in a row. A new run carries the learned pacing only when the answers by pace back it
  (:func:`~scrapy_scale.throttle.learned.restore_state`): no ratchet run after run;
- **recovery**: each success moves the delay ``recovery`` of the way down to its
  goal, which stays :data:`MARGIN` above the remembered too-fast spacing (none while
  recent refusals outnumber good answers). That memory halves every
  :data:`MEMORY_HALF_LIFE` seconds and every :data:`SUCCESS_HALF_LIFE` good answers,
  so a site that raised its limit is found again, one rate-limited answer at a time;
- **bounds**: never below ``min_delay`` (or the robots.txt Crawl-delay, unless the
  profile sets ``min_delay``), never above ``max_delay``.

The spacing actually enforced is the larger of the delay and ``1 / max_rate``.
A ``Retry-After`` (when the profile honours it) pauses the whole site until then,
capped by ``SCALE_RETRY_AFTER_MAX``.
"""

from __future__ import annotations

from scrapy_scale.throttle.state import SiteState

#: the delay settles this fraction above the spacing a site said was too fast
MARGIN = 0.1
#: a robots.txt Crawl-delay is kept this much above its seconds: spacing is kept where requests
#: are handed out, and a loaded machine delays one send by up to about 0.15 s on its way to the
#: site (a CI run saw two arrivals 1.91 s apart under a Crawl-delay of 2 s without it)
CRAWL_DELAY_MARGIN = 0.08
#: a site with a max_rate of this many requests/s or fewer is kept one request at a time,
#: each spaced from the previous one's answer (as a Crawl-delay is)
ONE_AT_A_TIME_RATE = 1.0
#: seconds for the memory of a too-fast spacing to halve
MEMORY_HALF_LIFE = 300.0
#: good answers in a row that prove a pace
PROVEN_AFTER_GOOD = 5
#: good answers at the safe pace before a rate-limited answer there raises the delay again
STEP_AFTER_GOOD = 20
#: the share of recent answers that were refused above which no refusal is forgiven
SMALL_SHARE = 0.1
#: weight of the newest answer in the moving share of refusals (about the last 20 answers)
SHARE_WEIGHT = 1 / STEP_AFTER_GOOD
#: good answers in a row after which unconfirmed steps start to fade
STEPS_FADE_AFTER = 3
#: good answers in a row (after STEPS_FADE_AFTER) for the unconfirmed steps to halve
STEPS_HALF_LIFE = 1.0
#: good answers for the memory of a too-fast spacing to halve (besides the time)
SUCCESS_HALF_LIFE = 1000.0
#: what each good answer leaves of that memory
SUCCESS_FADE = 0.5 ** (1 / SUCCESS_HALF_LIFE)
#: what each good answer in a row leaves of the unconfirmed steps
STEPS_FADE = 0.5 ** (1 / STEPS_HALF_LIFE)
#: weight of the newest gap in the moving average of the spacing actually sent
GAP_WEIGHT = 0.2
#: a refusal at a spacing this many times the fastest pace proven is no sign of the rate...
NOT_THE_RATE = 2.0
#: ...unless refusals are this share of the recent answers (then the limit dropped)
STALE_SHARE = 0.3
#: in the spacing sent since the last refusal, a gap counts as this many intervals at most
#: (longer, the crawl had nothing to send), and that spacing as this many refused ones
IDLE_GAP, CYCLE_CAP = 2.0, 1.25
#: a route's two cycles in a row between refusals whose spacings agree within this share are
#: a bucket's beat (:meth:`~scrapy_scale.throttle.pacing.Pacing.on_rate_limited`)
BEAT = 0.1
#: share of the recent answers (about the last 20) that said "overloaded" (a 503 without
#: Retry-After) from which they are taken as pressure, not noise
OVERLOAD_SHARE = 0.15


def fade(s: SiteState, now: float) -> float:
    """How much of the too-fast memory is left at ``now``."""
    return 0.5 ** (max(0.0, now - s.too_fast_at) / MEMORY_HALF_LIFE)


def remember(s: SiteState, now: float, tf: float, settled: float, peak: float) -> None:
    """Store the too-fast memory as of ``now`` (the confirmed part at most all of it)."""
    s.too_fast, s.too_fast_at = tf, now
    s.settled, s.peak = min(settled, tf), max(peak, tf)


def stray(s: SiteState, spacing: float, isolated: bool, share: float) -> bool:
    """A refusal at the safe pace that is forgiven (no step), while refusals are under
    :data:`SMALL_SHARE` of the recent answers: an isolated one (:data:`STEP_AFTER_GOOD`
    good answers since the last refusal, :data:`FORGIVE_EVERY` since the last forgiven)
    at a pace the site has proven, or the refusal of the first request after a
    Retry-After pause (the rested site refused it: not the rate's doing), once per
    pause."""
    if share < SMALL_SHARE and s.proven and spacing >= s.proven * (1 - MARGIN) and isolated:
        return True
    if share < SMALL_SHARE and s.good_since_pause == 0 and s.paused_until > 0 and not s.pause_excused:
        s.pause_excused = True
        return True
    return False


def fade_on_success(s: SiteState, now: float, tf: float) -> float:
    """A good answer is evidence the site takes more than the memory of a too-fast spacing
    (``tf``, as of ``now``) says: the memory fades with good answers too, so the delay comes
    back down towards the site's real capacity (one rate-limited answer at a time), instead
    of only growing. Small steps not confirmed yet fade fast once good answers come in a row
    again: stray refusals (planned faults) do not keep the site slow run after run. Returns
    the memory kept."""
    f = fade(s, now) * SUCCESS_FADE
    settled, peak = s.settled * f, s.peak * f
    tf *= SUCCESS_FADE
    if s.good_since_refused >= STEPS_FADE_AFTER and tf > settled:
        tf = settled + (tf - settled) * STEPS_FADE
    remember(s, now, tf, settled, peak)
    return tf


def count_good(s: SiteState) -> None:
    """One more good answer in each run the site counts, and the moving shares of refused
    and overloaded answers lower."""
    s.good_since_slowed += 1
    s.good_since_pause += 1
    s.good_since_refused += 1
    s.good_since_forgiven += 1
    s.refused_share *= 1 - SHARE_WEIGHT
    s.overload_share *= 1 - SHARE_WEIGHT


def pause_site(s: SiteState, now: float, until: float) -> None:
    """Pause the site until ``until`` (a later pause only), counting the seconds paused."""
    if until > s.paused_until:
        s.paused_seconds += until - max(now, s.paused_until)
        s.paused_until = until
        s.paused_at = now
        s.good_since_pause = 0
        s.pause_excused = False


def changed(s: SiteState, old: float, now: float, force: bool = False) -> None:
    """The site's delay moved from ``old`` (or ``force``: its pacing was learned anyway)."""
    if force or abs(s.delay - old) > 1e-9:
        s.learned = True
        s.changed_at = now
