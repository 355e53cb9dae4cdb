"""Throttle policy: profiles, the adaptive delay, pauses, the local gate (no reactor)."""

from __future__ import annotations

import math

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.throttle.notes import PauseNotes
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.policy import (
    CRAWL_DELAY_MARGIN,
    MARGIN,
    MEMORY_HALF_LIFE,
    PROVEN_AFTER_GOOD,
    STEP_AFTER_GOOD,
    SUCCESS_FADE,
)
from scrapy_scale.throttle.profiles import ProfileError, Profiles, parse_pattern, registrable_domain
from tests.support.demo_plan import demo_plan_run

pytestmark = pytest.mark.pure

# ---- profiles -------------------------------------------------------------------------


def test_patterns_resolve_by_specificity() -> None:
    p = Profiles.parse(
        {
            "default": {"max_rate": 10.0},
            "example.com": {"max_rate": 1.0},
            "*.example.com": {"max_rate": 2.0},
            "*.api.example.com": {"max_rate": 3.0},
            "www.example.com": {"max_rate": 4.0},
        }
    )
    assert p.match("www.example.com").profile.max_rate == 4.0  # exact host
    assert p.match("v1.api.example.com").profile.max_rate == 3.0  # longest wildcard
    assert p.match("shop.example.com").profile.max_rate == 2.0  # wildcard over the site
    assert p.match("example.com").profile.max_rate == 1.0  # the site itself (the wildcard skips it)
    assert p.match("other.org").profile.max_rate == 10.0  # default
    assert p.match("other.org").pattern == "default"


def test_a_registrable_domain_groups_its_hosts_into_one_pacing_key() -> None:
    p = Profiles.parse({"example.co.uk": {"min_delay": 2.0}})
    a, b = p.match("a.example.co.uk"), p.match("B.Example.co.uk.")
    assert a.key == b.key == "example.co.uk"
    assert a.profile.min_delay == 2.0
    # a host matched by the default, an exact host or a wildcard is its own key
    assert p.match("a.other.com").key == "a.other.com"
    assert Profiles.parse({"*.x.com": {}}).match("a.x.com").key == "a.x.com"


def test_registrable_domain_uses_the_bundled_list_and_no_network() -> None:
    assert registrable_domain("a.b.example.co.uk") == "example.co.uk"
    assert registrable_domain("127.0.0.2") is None
    assert registrable_domain("localhost") is None
    assert parse_pattern("example.com").kind == "site"
    assert parse_pattern("shop.example.com").kind == "host"
    assert parse_pattern("shop1.example.test").kind == "host"  # .test is no public suffix
    assert parse_pattern("127.0.0.2").kind == "host"


def test_fields_missing_from_a_profile_come_from_default() -> None:
    p = Profiles.parse({"default": {"slowdown": 3.0, "min_delay": 0.5}, "a.com": {"max_rate": 2}})
    m = p.match("a.com")
    assert m.profile.slowdown == 3.0 and m.profile.max_rate == 2.0 and m.profile.min_delay == 0.5
    assert "min_delay" in m.explicit  # set by default: a Crawl-delay does not override it


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"a.com": {"max_rate": -1}}, "max_rate must be > 0"),
        ({"a.com": {"max_rate": 0}}, "max_rate must be > 0"),
        ({"a.com": {"min_delay": 5, "max_delay": 1}}, "min_delay 5 is above max_delay 1"),
        ({"a.com": {"speed": 1}}, "unknown field 'speed'"),
        ({"http://a.com/": {}}, "is not a host"),
        ({"a.*.com": {}}, "is not a host"),
        ({"a.com:8080": {}}, "is not a host"),
        ({"a.com": {"concurrency": 0}}, "concurrency must be an integer >= 1"),
        ({"a.com": {"retry_after": "yes"}}, "retry_after must be true or false"),
        ({"a.com": {"slowdown": 0.5}}, "slowdown must be >= 1"),
        ({"a.com": {"recovery": 2}}, "recovery must be <= 1"),
        ({"a.com": {"min_delay": "x"}}, "min_delay must be a number"),
        ({"a.com": 5}, "a profile is a dict"),
        ({"A.com": {}, "a.com": {}}, "given twice"),
    ],
)
def test_bad_profiles_are_refused_with_what_is_wrong(raw: dict, words: str) -> None:
    with pytest.raises(ProfileError, match=words.replace("*", r"\*").replace("(", r"\(")):
        Profiles.parse(raw)


# ---- the adaptive delay ----------------------------------------------------------------


def pacing(profiles: dict | None = None, **kw: float) -> tuple[Pacing, FakeClock]:
    clk = FakeClock(1000.0)
    return Pacing(Profiles.parse(profiles or {}), clk, **kw), clk


def test_latency_raises_the_delay_at_once_and_success_recovers_it_gradually() -> None:
    pc, clk = pacing({"default": {"start_delay": 1.0, "recovery": 0.5}})
    s = pc.on_success("h", latency=3.0)
    assert s.delay == 3.0  # follows a slower site at once (target_concurrency 1)
    pc.on_success("h", latency=1.0)
    assert s.delay == pytest.approx(2.0)  # halfway down to the goal
    pc.on_success("h", latency=1.0)
    assert s.delay == pytest.approx(1.5)


def test_a_fast_429_slows_the_domain_down_which_autothrottle_does_not() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0, "slowdown": 2.0}})
    for _ in range(5):  # hand out at 10/s
        pc.handed_out("h")
        clk.advance(0.1)
    pause = pc.on_rate_limited("h", latency=0.001, retry_after=None)
    s = pc.site("h")
    assert pause == 0.0
    assert s.delay == pytest.approx(0.2)  # the spacing it complained about (0.1) x slowdown
    assert s.too_fast == pytest.approx(0.1)


def test_answers_to_requests_sent_before_the_slowdown_do_not_slow_down_again() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.2}})
    pc.on_rate_limited("h", latency=0.01, retry_after=None)
    d = pc.site("h").delay
    clk.advance(0.05)
    pc.on_rate_limited("h", latency=0.5, retry_after=None)  # sent 0.45 s before the slow-down
    assert pc.site("h").delay == d
    assert pc.site("h").rate_limited == 2
    clk.advance(1.0)
    pc.on_rate_limited("h", latency=0.01, retry_after=None)  # sent after it, at the learned safe pace
    assert pc.site("h").delay == pytest.approx(d * (1 + MARGIN))  # a small step, not x slowdown
    pc.site("h").delay = 0.1  # faster than the learned safe pace: a full slow-down
    clk.advance(1.0)
    pc.on_rate_limited("h", latency=0.01, retry_after=None)
    assert pc.site("h").delay == pytest.approx(0.1 * 2)


def test_at_a_proven_pace_an_isolated_429_is_forgiven_and_a_second_one_steps() -> None:
    """Issue 19 item 17 and its review: once the site answered a run of good answers at a
    pace, an isolated rate-limited answer there is no step (a stray one); a second one
    before STEP_AFTER_GOOD good answers is a step, and the pace is no longer proven."""
    pc, clk = pacing({"default": {"start_delay": 0.2}})
    assert pc.restore({"h": {"delay": 0.22, "at": clk.now, "too_fast": 0.2, "too_fast_at": clk.now}}) == 1
    s = pc.site("h")
    assert s.proven == 0.0 and s.settled == 0.2  # a too-fast spacing learned (confirmed)
    for i in range(STEP_AFTER_GOOD):
        if i == PROVEN_AFTER_GOOD:
            assert s.proven  # a few good answers in a row prove a pace
        clk.advance(0.3)
        pc.on_success("h", latency=0.01)
    assert s.proven == pytest.approx(pc.interval(s))
    clk.advance(1.0)
    before = s.delay
    pc.on_rate_limited("h", latency=0.01, retry_after=1.0)  # isolated, at the proven pace
    assert s.delay == before and s.proven  # forgiven
    clk.advance(1.5)
    for _ in range(3):
        clk.advance(0.3)
        pc.on_success("h", latency=0.01)
    assert s.delay >= before * 0.99  # and held there (the memory's fading aside): no faster
    held = s.delay
    clk.advance(0.3)
    pc.on_rate_limited("h", latency=0.01, retry_after=1.0)  # a second one, 3 good answers later
    assert s.delay == pytest.approx(held * (1 + MARGIN))  # one small step
    assert s.proven == 0.0  # the step cleared the proven pace
    assert s.rate_limited == 2 and s.paused_seconds > 0


def test_a_refusal_of_the_first_request_after_a_pause_is_no_step() -> None:
    """Issue 19 item 17: after a Retry-After pause the site is rested; refusing the very
    first request then is not the rate's doing (the demo's planned 429s, one after the
    other), while a refusal after good answers is (the rested site had its fill)."""
    pc, clk = pacing({"default": {"start_delay": 0.2}})
    pc.on_rate_limited("h", latency=0.01, retry_after=1.0)  # the first: a full slow-down
    s = pc.site("h")
    d = s.delay
    clk.advance(1.5)
    pc.on_rate_limited("h", latency=0.01, retry_after=1.0)  # the first request after the pause
    assert s.delay == d and s.rate_limited == 2
    clk.advance(1.5)
    pc.on_success("h", latency=0.01)
    before = s.delay
    clk.advance(0.3)
    pc.on_rate_limited("h", latency=0.01, retry_after=1.0)  # after a good answer: the rate
    assert s.delay == pytest.approx(before * (1 + MARGIN))


def test_stray_429s_at_a_safe_pace_do_not_ratchet_the_delay_up() -> None:
    """A site answering 429 to 40% of first requests whatever the pace (faults, not a rate):
    the delay grows by small steps, not by ``slowdown`` per 429."""
    pc, clk = pacing({"default": {"start_delay": 0.05}})
    for i in range(40):
        pc.handed_out("h")
        clk.advance(pc.interval(pc.site("h")) + 0.01)
        if i % 5 in (1, 3):
            pc.on_rate_limited("h", latency=0.005, retry_after=1.0)
            clk.advance(1.0)
        else:
            pc.on_success("h", latency=0.005)
    assert pc.site("h").delay < 1.0, pc.site("h").delay


def test_recovery_settles_above_the_too_fast_spacing_once_confirmed_and_the_memory_decays() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.2, "recovery": 0.5}})
    pc.on_rate_limited("h", latency=0.0, retry_after=None)
    s = pc.site("h")
    assert s.delay == pytest.approx(0.4)
    for _ in range(50):
        pc.on_success("h", latency=0.001)
    assert s.delay < 0.01  # one refusal and a long run of good answers: not confirmed, undone
    pc.on_rate_limited("h", latency=0.0, retry_after=None)  # refused again below it: confirmed
    assert s.too_fast == s.settled == pytest.approx(0.2 * SUCCESS_FADE**50)
    for _ in range(50):
        pc.on_success("h", latency=0.001)
    # now the memory holds, and fades with good answers as well as with time
    assert s.delay == pytest.approx(0.2 * SUCCESS_FADE**100 * (1 + MARGIN), rel=1e-3)
    clk.advance(MEMORY_HALF_LIFE)
    for _ in range(50):
        pc.on_success("h", latency=0.001)
    assert s.delay == pytest.approx(0.1 * SUCCESS_FADE**150 * (1 + MARGIN), rel=1e-3)


def test_bounds_min_delay_max_delay_and_crawl_delay() -> None:
    pc, clk = pacing({"default": {"max_delay": 5.0}, "fixed.com": {"min_delay": 0.5}})
    s = pc.on_success("h", latency=100.0)
    assert s.delay == 5.0
    pc.set_crawl_delay("c.org", 2.0)
    for _ in range(30):
        pc.on_success("c.org", latency=0.0)
    kept = 2.0 * (1 + CRAWL_DELAY_MARGIN)  # Crawl-delay is the floor, kept with a send margin
    assert pc.site("c.org").delay == pytest.approx(kept)
    assert pc.interval(pc.site("c.org")) == pytest.approx(kept)
    pc.set_crawl_delay("fixed.com", 2.0)  # the profile's min_delay wins
    for _ in range(30):
        pc.on_success("fixed.com", latency=0.0)
    assert pc.site("fixed.com").delay == pytest.approx(0.5, rel=1e-3)


# ---- the gate ------------------------------------------------------------------------------


def test_the_gate_spaces_requests_by_the_interval_and_max_rate() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0}, "r.com": {"max_rate": 4.0, "start_delay": 0.0}})
    assert pc.hold_until("r.com") == 0.0
    pc.handed_out("r.com")
    assert pc.hold_until("r.com") == pytest.approx(clk.now + 0.25)
    clk.advance(0.25)
    assert pc.hold_until("r.com") == 0.0
    pc.handed_out("other.com")
    assert pc.hold_until("other.com") == 0.0  # no delay there


def test_concurrency_holds_until_a_request_ends() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0, "concurrency": 1}})
    pc.handed_out("h")
    assert pc.hold_until("h") == math.inf
    pc.ended("h")
    assert pc.hold_until("h") == 0.0


def test_retry_after_pauses_the_whole_site_and_is_capped() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0}, "free.com": {"retry_after": False}}, retry_after_cap=60.0)
    assert pc.on_rate_limited("a.com", latency=0.01, retry_after=10.0) == 10.0
    assert pc.hold_until("a.com") == pytest.approx(clk.now + 10.0)
    assert pc.hold_until("b.com") == 0.0  # other sites go on
    assert pc.on_rate_limited("c.com", latency=0.01, retry_after=86_400.0) == 60.0
    assert pc.capped == [("c.com", 86_400.0)]
    assert pc.on_rate_limited("free.com", latency=0.01, retry_after=10.0) == 0.0
    clk.advance(10.0)
    assert pc.hold_until("a.com") == 0.0
    assert pc.site("a.com").paused_seconds == pytest.approx(10.0)


def test_learned_state_exports_and_restores_newest_first() -> None:
    pc, clk = pacing({"default": {"start_delay": 1.0}})
    pc.on_rate_limited("h", latency=0.0, retry_after=None)
    data = pc.export()
    assert set(data) == {"h"}
    fresh, clk2 = pacing({"default": {"start_delay": 1.0}})
    clk2.now = clk.now
    assert fresh.restore(data) == 1
    assert fresh.site("h").delay == pc.site("h").delay
    assert fresh.too_fast(fresh.site("h")) == pytest.approx(pc.too_fast(pc.site("h")))
    assert fresh.restore(data) == 0  # not newer than what it has


@pytest.mark.parametrize(
    "bad",
    [
        {"delay": math.nan, "at": 1.0},
        {"delay": math.inf, "at": 1.0},
        {"delay": -1.0, "at": 1.0},
        {"delay": "x", "at": 1.0},
        {"delay": 1.0, "at": math.nan},
        {"at": 1.0},
        [1, 2],
    ],
)
def test_learned_state_that_is_not_finite_is_not_restored_and_is_written_over(bad: object) -> None:
    """Issue 19 item 4: a NaN delay read back turned the site's pacing off (NaN compares
    false with everything), and stayed in the file."""
    pc, clk = pacing({"default": {"min_delay": 0.3, "start_delay": 0.5}})
    clk.now = 1000.0
    assert pc.restore({"h": bad}) == 0  # type: ignore[dict-item]
    assert pc.rejected and pc.rejected[0][0] == "h" and "not used" in pc.rejected[0][1]
    s = pc.site("h")
    assert s.delay == 0.5 and pc.interval(s) == 0.5
    pc.handed_out("h")
    assert pc.hold_until("h") == pytest.approx(1000.5)  # paced as the profile says
    saved = {
        "delay": 0.5,
        "too_fast": 0.0,
        "too_fast_at": 0.0,
        "proven": 0.0,
        "settled": 0.0,
        "fastest_ok": 0.0,
        "paces": {},
        "at": 1000.0,
        "paused_until": 0.0,
    }
    assert pc.export() == {"h": saved}  # sane state is saved over the bad one


def test_learned_times_in_the_future_are_brought_back_to_now() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.5}})
    clk.now = 1000.0
    far = 99999999999.0
    assert pc.restore({"h": {"delay": 2.0, "at": far, "too_fast": 1.5, "too_fast_at": far}}) == 1
    s = pc.site("h")
    assert (s.delay, s.changed_at, s.too_fast_at) == (2.0, 1000.0, 1000.0)
    assert pc.rejected == [("h", "time 99999999999 is in the future; taken as now")]
    clk.advance(MEMORY_HALF_LIFE)
    assert pc.too_fast(s) == pytest.approx(0.75)  # its memory fades again
    assert pc.restore({"h": {"delay": 2.0, "at": 1001.0, "too_fast": math.nan}}) == 1
    assert (s.too_fast, pc.rejected[-1]) == (0.0, ("h", "too-fast spacing nan is unusable; dropped"))


def simulate(rate: float, seconds: float, latency: float = 0.005, conc: int = 4) -> list[tuple[float, bool]]:
    """A site allowing ``rate`` requests/s (token bucket, burst ``rate``, 429 + Retry-After: 1
    beyond, as the testbed's rate limit) and a crawler that sends whenever the gate lets it."""
    pc, clk = pacing()
    tokens, last = rate, clk.now
    log: list[tuple[float, bool]] = []
    flying: list[tuple[float, bool]] = []
    end = clk.now + seconds
    while clk.now < end:
        for item in [x for x in flying if x[0] <= clk.now]:
            flying.remove(item)
            pc.ended("h")
            if item[1]:
                pc.on_success("h", latency)
            else:
                pc.on_rate_limited("h", latency, 1.0)
        if len(flying) < conc and pc.hold_until("h") == 0.0:
            pc.handed_out("h")
            tokens, last = min(rate, tokens + (clk.now - last) * rate), clk.now
            ok = tokens >= 1
            tokens -= ok
            log.append((clk.now, ok))
            flying.append((clk.now + latency, ok))
        clk.advance(0.001)
    return log


def test_against_a_rate_limited_site_it_learns_the_limit() -> None:
    log = simulate(rate=5.0, seconds=240)
    t0 = log[0][0]
    learned = [ok for t, ok in log if t >= t0 + 60]
    assert learned.count(False) / len(learned) < 0.02
    assert len(learned) / 180 >= 0.85 * 5.0


def test_a_bad_profile_setting_fails_naming_the_setting() -> None:
    from scrapy_scale import config
    from scrapy_scale.config import ScaleSettingError

    config.load_declarations()
    with pytest.raises(ScaleSettingError, match="SCALE_DOMAIN_PROFILES.*max_rate must be > 0"):
        config.get({"SCALE_DOMAIN_PROFILES": '{"a.com": {"max_rate": -5}}'}, "SCALE_DOMAIN_PROFILES")
    assert (
        config.get({"SCALE_DOMAIN_PROFILES": {"a.com": {"max_rate": 5}}}, "SCALE_DOMAIN_PROFILES")
        .match("a.com")
        .profile.max_rate
        == 5.0
    )


def test_pause_notes_one_info_line_per_site_per_minute() -> None:
    clk = FakeClock()
    notes = PauseNotes(clk, every=60.0)
    assert notes.note("a") == 0  # the first pause of a site: INFO
    assert notes.note("b") == 0  # sites are counted apart
    for _ in range(5):
        clk.advance(5)
        assert notes.note("a") is None  # within the minute: DEBUG
    clk.advance(35)
    assert notes.note("a") == 5  # a minute after the last INFO line: INFO, with what went to DEBUG
    assert notes.note("a") is None
    clk.advance(-3600)  # a clock that went back: not a reason for silence forever
    assert notes.note("a") == 1


def test_planned_429s_do_not_ratchet_the_learned_delay_up_run_after_run() -> None:
    """Issue 19 item 17: the demo got slower every run (54 s, 1 min 44 s, 3 min 24 s, ...):
    each run's planned 429s stepped the restored delay up again, and nothing brought it
    down. Six runs back to back, each starting from what the one before learned."""
    clk = FakeClock(1000.0)
    learned: dict = {}
    took, delays = [], []
    for _ in range(6):
        pc = Pacing(Profiles.parse({"default": {"min_delay": 0.2, "start_delay": 0.25}}), clk)
        pc.restore(learned)
        took.append(demo_plan_run(pc, clk))
        delays.append(pc.site("h").delay)
        learned = pc.export()
        clk.advance(5.0)
    assert max(took) <= 1.2 * min(took), took
    assert max(delays[1:]) <= delays[0] * 1.05, delays  # no ratchet
    assert delays[-1] < 0.85 * delays[0], delays  # coming down: the site has no limit at all


def limited_site(
    pc: Pacing,
    clk: FakeClock,
    gap: float,
    seconds: float,
    *,
    strict: bool = False,
    retry_after: float | None = None,
    latency: float = 0.01,
) -> tuple[int, int]:
    """A site allowing one request per ``gap`` seconds, crawled as fast as the gate lets
    (one request in flight). ``strict``: a refused request counts too (a site that
    answers 429 to everything while it is asked too often). Returns (answers, refused)."""
    s = pc.site("h")
    next_ok = getattr(s, "_test_next_ok", -math.inf)
    n = refused = 0
    end = clk.now + seconds
    while clk.now < end:
        hold = pc.hold_until("h")
        if hold:
            clk.now = max(clk.now + 0.001, hold)
            continue
        pc.handed_out("h")
        sent, n = clk.now, n + 1
        clk.advance(latency)
        pc.ended("h")
        if sent >= next_ok:
            next_ok = sent + gap
            pc.on_success("h", latency)
        else:
            if strict:
                next_ok = sent + gap
            refused += 1
            pc.on_rate_limited("h", latency, retry_after)
    s._test_next_ok = next_ok  # type: ignore[attr-defined]
    return n, refused


def minutes_after_a_drop(pc: Pacing, clk: FakeClock, **kw: object) -> list[tuple[int, int]]:
    return [limited_site(pc, clk, 1.0, 60.0, **kw) for _ in range(4)]  # type: ignore[arg-type]


def assert_converges(minutes: list[tuple[int, int]]) -> None:
    """Within the first minute the pace follows the site; then a few % refused at most."""
    assert minutes[0][1] <= 30, minutes
    later = minutes[1:]
    assert sum(r for _, r in later) / sum(n for n, _ in later) <= 0.05, minutes


@pytest.mark.parametrize(
    "kw",
    [{}, {"strict": True}, {"retry_after": 1.0}, {"strict": True, "retry_after": 0.3}],
    ids=["lenient", "strict", "retry-after-1", "strict-retry-after-0.3"],
)
def test_a_limit_that_drops_mid_crawl_is_followed_within_a_minute(kw: dict) -> None:
    """Review of issue 19 item 17: a site learned at 5/s whose limit drops to 1/s got 259 of
    260 answers as 429 every minute: at the proven pace each refusal was forgiven, and each
    rare good answer pulled the delay down again."""
    pc, clk = pacing()
    _, refused = limited_site(pc, clk, 0.2, 110.0)
    assert pc.site("h").proven and refused < 30  # learned 5/s, a pace proven
    assert_converges(minutes_after_a_drop(pc, clk, **kw))


def test_a_fresh_strict_site_with_a_short_retry_after_is_followed() -> None:
    """Review of issue 19 item 17: a fresh site allowing 1/s, answering 429 with Retry-After:
    0.3 to everything asked too often: each refusal was the first request after a pause,
    so none was a step (169 of 170 refused)."""
    pc, clk = pacing()
    assert_converges(minutes_after_a_drop(pc, clk, strict=True, retry_after=0.3))


def test_a_restart_with_a_restored_proven_pace_follows_a_dropped_limit() -> None:
    pc, clk = pacing()
    limited_site(pc, clk, 0.2, 110.0)
    learned = pc.export()
    assert learned["h"]["proven"]
    clk.advance(600.0)
    fresh = Pacing(Profiles.parse({}), clk)
    assert fresh.restore(learned) == 1 and fresh.site("h").proven
    assert_converges(minutes_after_a_drop(fresh, clk, strict=True))


def test_the_refusal_after_a_pause_is_excused_once_per_pause() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.2}})
    assert pc.restore({"h": {"delay": 0.22, "at": clk.now, "too_fast": 0.2, "too_fast_at": clk.now}}) == 1
    s = pc.site("h")
    for i in range(2 * STEP_AFTER_GOOD + 10):
        clk.advance(0.5)
        pc.on_success("h", latency=0.01)
        if i == STEP_AFTER_GOOD + 5:
            pc.on_rate_limited("h", latency=0.01, retry_after=None)  # isolated: forgiven
    assert not s.pause_excused
    pc.pause(s, clk.now + 1.0)
    clk.advance(1.0)
    d = s.delay
    pc.on_rate_limited("h", latency=0.01, retry_after=None)  # the first after the pause: excused
    assert s.delay == d and s.pause_excused  # (not isolated: another was forgiven lately)
    clk.advance(0.01)
    pc.on_rate_limited("h", latency=0.001, retry_after=None)  # another, same pause: a step
    assert s.delay == pytest.approx(d * (1 + MARGIN))


def test_no_recovery_while_refusals_outnumber_good_answers() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.2}})
    s = pc.site("h")
    for _ in range(30):
        clk.advance(1.0)
        pc.on_rate_limited("h", latency=0.01, retry_after=None)
    d = s.delay
    assert s.refused_share > 0.5
    pc.on_success("h", latency=0.01)  # one got through
    assert s.delay == d


@pytest.mark.parametrize("field", ["too_fast", "proven"])
def test_a_learned_spacing_above_max_delay_is_dropped_with_one_warning(field: str) -> None:
    """Review of issue 19 item 4: a huge too-fast (or proven) spacing read back passed as
    finite and pinned the site at max_delay for days while its memory faded."""
    pc, clk = pacing({"default": {"start_delay": 0.5, "max_delay": 30.0}})
    raw = {"delay": 0.5, "at": clk.now, "too_fast": 0.2, "too_fast_at": clk.now, field: 1e12}
    assert pc.restore({"h": raw}) == 1
    s = pc.site("h")
    assert getattr(s, field) == 0.0
    assert pc.rejected == [("h", f"{field.replace('_', '-')} spacing 1e+12 s is above max_delay 30 s; dropped")]
    for _ in range(10):
        pc.on_success("h", latency=0.01)
    assert pc.interval(s) < 1.0  # paced as learned, not pinned at max_delay
