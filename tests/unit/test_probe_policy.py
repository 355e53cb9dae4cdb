"""The probe's policy on synthetic answer plans: staircase, stop rules, bisection,
client-bound steps, budget, recommendation; and the probe profile file the throttle reads."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.probe.figures import Answer, StepFigures, percentile, summarise
from scrapy_scale.probe.policy import BAD, CLIENT_BOUND, GOOD, Limits, Plan, judge, step_done, wait_after
from scrapy_scale.probe.report import save_profiles
from scrapy_scale.probe.run import ProbeError, SiteProbe, group_by_host
from scrapy_scale.throttle import probed
from scrapy_scale.throttle.settings import profiles as throttle_profiles

pytestmark = pytest.mark.pure

Site = Callable[[int], tuple[float, str]]  # concurrency -> (latency, class of every answer)


#: the status of an answer of a class in these synthetic steps (others: 200)
STATUS = {"rate_limited": 429, "transient": 503}


def step(
    c: int,
    latency: float,
    classes: list[str],
    *,
    phase: str = "ramp",
    busy: float = 0.2,
    in_flight: float | None = None,
    retry_after: bool = False,
) -> StepFigures:
    """A step of ``c`` in flight for 4 s: closed loop, every answer after ``latency``; the
    answers' classes cycle through ``classes``."""
    answers, t, k = [], 0.0, 0
    while t + latency <= 4.0:
        for _ in range(c):
            cls = classes[k % len(classes)]
            answers.append(Answer(t, t + latency, cls, STATUS.get(cls, 200), retry_after))
            k += 1
        t += latency
    return summarise(
        answers,
        concurrency=c,
        phase=phase,
        start=0.0,
        end=4.0,
        warmup=0.5,
        requests=len(answers),
        in_flight=c if in_flight is None else in_flight,
        busy=busy,
    )


def knee_site(cap: int, base: float = 0.1) -> Callable[..., StepFigures]:
    """Latency flat up to ``cap`` in flight, then (n / cap) ** 3 times slower."""

    def run(c: int, phase: str) -> StepFigures:
        return step(c, base * max(1.0, c / cap) ** 3, ["ok"], phase=phase)

    return run


def drive(
    plan: Plan, site: Callable[..., StepFigures], clock: FakeClock | None = None
) -> list[tuple[int, float | None]]:
    ran = []
    while (nxt := plan.next_step()) is not None:
        c, phase, max_rate = nxt
        ran.append((c, max_rate))
        plan.record(site(c, phase))
        if clock is not None:
            clock.advance(4.0)
    return ran


def test_a_confirming_run_with_fewer_in_flight_does_not_overturn_a_slowdown() -> None:
    """CI, loaded: a slowdown at 16 (14.1 in flight) was "confirmed" good by a run the probe
    kept at 12.2 in flight, and the knee came out at 16 for a site whose knee is 12."""
    site = knee_site(12)
    runs: dict[int, int] = {}

    def loaded(c: int, phase: str) -> StepFigures:
        runs[c] = runs.get(c, 0) + 1
        if c == 16 and runs[c] == 2:  # the confirming run, under-filled: the site's knee's latency
            return step(16, 0.1, ["ok"], phase=phase, in_flight=12.2)
        return site(c, phase)

    plan = Plan(Limits(cap=64))
    ran = drive(plan, loaded)
    assert [c for c, _ in ran][:6] == [1, 2, 4, 8, 16, 16]
    confirm = plan.result.steps[5]
    assert confirm.verdict == BAD and "its confirming run had 12.2 in flight" in confirm.reasons[-1]
    assert plan.result.knee is not None and plan.result.knee.concurrency == 12
    # a confirming run as full as the first still clears the step (noise, not a knee)
    slow_once: list[int] = []

    def noisy(c: int, phase: str) -> StepFigures:
        if c == 16 and not slow_once:
            slow_once.append(c)
            return step(16, 0.3, ["ok"], phase=phase)
        return step(c, 0.1, ["ok"], phase=phase)

    plan = Plan(Limits(cap=64))
    drive(plan, noisy)
    assert [s.verdict for s in plan.result.steps if s.concurrency == 16] == [BAD, GOOD]


def test_percentile_and_summary_drop_the_warm_up() -> None:
    assert percentile([], 0.95) == 0.0
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.5) == 5
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95) == 10
    answers = [Answer(0.1, 0.2, "rate_limited", 429)] + [
        Answer(1.0 + i / 10, 1.05 + i / 10, "ok", 200) for i in range(20)
    ]
    f = summarise(answers, concurrency=1, phase="ramp", start=0.0, end=3.0, warmup=0.5, requests=21)
    assert f.answers == 20  # the 429 was in the warm-up: not in the figures...
    assert f.rate_limited  # ...but a 429 anywhere in the step stops the ramp
    assert f.goodput == pytest.approx(20 / 2.5)
    assert f.p50 == pytest.approx(0.05)
    # a step stopped within its warm-up is judged on all it got
    g = summarise(answers[:1], concurrency=8, phase="ramp", start=0.0, end=0.3, warmup=0.5, requests=8)
    assert g.answers == 1 and g.success == 0.0


def test_staircase_then_bisection_finds_the_knee_and_recommends_below_it() -> None:
    plan = Plan(Limits(cap=64))
    ran = drive(plan, knee_site(12))
    # a step bad only by latency or goodput is run twice (confirmed)
    assert [c for c, _ in ran] == [1, 2, 4, 8, 16, 16, 12, 14, 14, 13, 13]
    r = plan.result
    assert r.knee is not None and r.knee.concurrency == 12
    assert r.first_bad is not None and r.first_bad.concurrency == 13
    assert "knee between 12 (good) and 13" in r.ended
    assert [s.verdict for s in r.steps] == [GOOD] * 4 + [BAD, BAD, GOOD, BAD, BAD, BAD, BAD]
    assert [s.reasons[-1] == "run again to confirm" for s in r.steps if s.verdict == BAD] == [True, False] * 3
    rec = r.recommendation("shop.test", 0.8)
    assert rec == {"shop.test": {"concurrency": 9, "max_rate": round(0.8 * r.knee.goodput, 2)}}
    assert r.knee.goodput == pytest.approx(120, rel=0.05)


def test_a_moment_of_noise_is_run_again_and_forgiven() -> None:
    runs: list[int] = []

    def hiccup(c: int, phase: str) -> StepFigures:
        runs.append(c)
        slow = c == 4 and runs.count(4) == 1  # a pause on the site's side, once
        return step(c, 0.1 * (3 if slow else 1), ["ok"], phase=phase)

    plan = Plan(Limits(cap=8))
    drive(plan, hiccup)
    assert runs == [1, 2, 4, 4, 8]
    assert plan.result.first_bad is None and "reached the cap (8)" in plan.result.ended
    assert plan.result.knee is not None and plan.result.knee.concurrency == 8


def test_never_more_than_twice_the_last_good_load() -> None:
    plan = Plan(Limits(cap=64))
    ran = drive(plan, knee_site(12))
    good_c, good_rate = 0, None
    for (c, max_rate), fig in zip(ran, plan.result.steps, strict=True):
        assert c <= max(1, 2 * good_c)
        assert max_rate == good_rate
        if fig.verdict == GOOD and c > good_c:
            good_c, good_rate = c, 2 * fig.goodput


def test_a_429_stops_the_ramp_and_bisection_stays_below_it() -> None:
    def bucket(c: int, phase: str) -> StepFigures:
        return step(c, 0.05, ["ok"] * 99 + ["rate_limited"] if c > 5 else ["ok"], phase=phase)

    plan = Plan(Limits())
    ran = drive(plan, bucket)
    assert [c for c, _ in ran] == [1, 2, 4, 8, 6, 5]
    assert plan.result.knee is not None and plan.result.knee.concurrency == 5
    assert plan.result.steps[3].reasons[0] == "429 / Retry-After"
    # a Retry-After with a 503 stops too (one in a hundred answers, success still 99%)
    f = judge(step(4, 0.05, ["ok"] * 99 + ["transient"], retry_after=True), 0.05, None, Limits())
    assert f.verdict == BAD and f.reasons == ["429 / Retry-After"]
    # a Retry-After on a 200 is no refusal (some servers send it with every answer)
    assert judge(step(4, 0.05, ["ok"], retry_after=True), 0.05, None, Limits()).verdict == GOOD


@pytest.mark.parametrize(
    "classes,verdict",
    [
        ({"ok": 99, "blocked": 1}, GOOD),  # 1%: not above
        ({"ok": 98, "blocked": 2}, BAD),  # 2% blocks
        ({"ok": 97, "transient": 3}, BAD),  # success 97%
        ({"ok": 98, "not_found": 2}, GOOD),  # a 404 is the site answering
    ],
)
def test_block_and_success_rules(classes: dict[str, int], verdict: str) -> None:
    good = classes.get("ok", 0) + classes.get("not_found", 0)
    f = StepFigures(4, "ramp", requests=100, answers=100, classes=classes, success=good / 100, in_flight=4, p95=0.05)
    assert judge(f, 0.05, None, Limits()).verdict == verdict


def test_latency_rule_has_a_noise_floor_and_goodput_a_slack() -> None:
    lim = Limits()
    assert judge(step(4, 0.011, ["ok"]), 0.005, None, lim).verdict == GOOD  # 2.2x but only 6 ms more
    slow = judge(step(4, 0.25, ["ok"]), 0.1, None, lim)
    assert slow.verdict == BAD and "p95 250 ms" in slow.reasons[0]
    last = step(4, 0.1, ["ok"])
    assert judge(step(4, 0.102, ["ok"]), 0.1, last, lim).verdict == GOOD  # 2% lower: noise
    assert judge(step(4, 0.11, ["ok"]), 0.1, last, lim).verdict == BAD  # 9% lower


def test_a_client_bound_step_is_not_the_knee_and_is_tried_once_more() -> None:
    def machine_limited(c: int, phase: str) -> StepFigures:
        # the site never slows down; past 4 the probe's process is saturated and the
        # latency it measures grows (its own queue), which must not be read as the site's
        return step(c, 0.01 * max(1, c / 4), ["ok"], phase=phase, busy=0.97 if c > 4 else 0.3)

    plan = Plan(Limits())
    ran = drive(plan, machine_limited)
    assert [c for c, _ in ran] == [1, 2, 4, 8, 8]
    r = plan.result
    assert r.client_bound and r.first_bad is None
    assert [s.verdict for s in r.steps[-2:]] == [CLIENT_BOUND, CLIENT_BOUND]
    assert "probe process busy 97%" in r.steps[-1].reasons[0]
    assert r.knee is not None and r.knee.concurrency == 4  # the last good step, not 8
    assert "the probe was the limit at concurrency 8" in r.ended


def loopback(c: int, goodput: float, p95: float) -> StepFigures:
    """A step on a site that answers at once: the figures of a loaded 2-core machine."""
    n = 400  # answers kept (the probe's budget counts requests)
    return StepFigures(
        c,
        "ramp",
        requests=n,
        answers=n,
        goodput=goodput,
        classes={"ok": n},
        p50=p95 / 2,
        p95=p95,
        in_flight=0.85 * c,
        busy=0.85,
        seconds=3.5,
    )


def test_a_lower_goodput_at_the_same_latency_is_the_probe_not_the_site() -> None:
    lim = Limits()
    last = judge(loopback(4, 4000, 0.0), None, None, lim)  # step 1's p95 may round to 0 ms
    assert last.verdict == GOOD
    flat = judge(loopback(8, 3600, 0.002), 0.0, last, lim)
    assert flat.verdict == CLIENT_BOUND and "at the same p95 (2 ms)" in flat.reasons[0]
    # a goodput drop that the latency explains is the site's (soft: run again to confirm)
    later = judge(loopback(8, 3600, 0.009), 0.0, last, lim)  # 9 ms more: under the p95 rule's floor
    assert later.verdict == BAD and later.soft and later.reasons == ["goodput 3600.0/s < 4000.0/s at 4"]
    slow_site = judge(step(4, 0.11, ["ok"]), 0.1, step(4, 0.1, ["ok"]), lim)
    assert slow_site.verdict == BAD and slow_site.reasons[0].startswith("goodput")


def test_a_probe_that_cannot_drive_a_fast_site_ends_client_bound_with_no_bad_step() -> None:
    clock = FakeClock()
    goodput = {1: 1500.0, 2: 2800.0, 4: 4000.0, 8: 3600.0}
    plan = Plan(Limits(cap=256), clock)
    ran = drive(plan, lambda c, phase: loopback(c, goodput[c], 0.001 if c < 8 else 0.002), clock)
    assert [c for c, _ in ran] == [1, 2, 4, 8, 8]
    r = plan.result
    assert r.client_bound and r.first_bad is None
    assert [s.verdict for s in r.steps] == [GOOD] * 3 + [CLIENT_BOUND] * 2
    assert "the probe was the limit at concurrency 8" in r.ended


def test_a_late_event_loop_is_client_bound() -> None:
    f = step(4, 0.1, ["ok"])
    f.loop_lag = 0.05  # half the latency measured was the probe's own delay
    assert judge(f, 0.1, None, Limits()).verdict == CLIENT_BOUND
    assert "event loop 50 ms late" in f.reasons[0]
    g = step(4, 0.1, ["ok"])
    g.loop_lag = 0.015  # under 20 ms: timer noise
    assert judge(g, 0.1, None, Limits()).verdict == GOOD


def test_few_in_flight_under_a_rate_ceiling_that_held_is_not_client_bound() -> None:
    f = step(1, 0.05, ["ok"], in_flight=0.4)
    f.rate_ceiling, f.offered = 8.0, 7.9  # the ceiling, not the probe's weakness, held them back
    assert judge(f, 0.05, None, Limits()).verdict == GOOD
    g = step(1, 0.05, ["ok"], in_flight=0.4)
    g.rate_ceiling, g.offered = 8.0, 3.0  # far under its ceiling: the probe could not keep up
    assert judge(g, 0.05, None, Limits()).verdict == CLIENT_BOUND


def test_in_flight_below_the_step_is_client_bound_and_a_recovered_step_goes_on() -> None:
    seen: list[int] = []

    def once_starved(c: int, phase: str) -> StepFigures:
        seen.append(c)
        starved = c == 4 and seen.count(4) == 1
        return step(c, 0.05, ["ok"], phase=phase, in_flight=2.0 if starved else None)

    plan = Plan(Limits(cap=8))
    drive(plan, once_starved)
    assert seen == [1, 2, 4, 4, 8]
    assert plan.result.steps[2].verdict == CLIENT_BOUND and "in flight 2.0 of 4" in plan.result.steps[2].reasons[0]
    assert not plan.result.client_bound
    assert "reached the cap (8)" in plan.result.ended


def test_a_site_bad_at_one_gets_no_recommendation() -> None:
    plan = Plan(Limits())
    drive(plan, lambda c, phase: step(c, 0.05, ["ok", "blocked"], phase=phase))
    assert plan.result.knee is None
    assert "fails already at concurrency 1" in plan.result.ended
    assert plan.result.recommendation("x.test", 0.8) is None


def test_budget_of_time_and_requests_ends_the_probe() -> None:
    clock = FakeClock()
    plan = Plan(Limits(max_time=10), clock=clock)
    ran = drive(plan, knee_site(100), clock)
    assert len(ran) == 3  # 4 s each: the fourth would start past 10 s
    assert "budget" in plan.result.ended
    plan = Plan(Limits(max_requests=300))
    drive(plan, knee_site(100))
    assert plan.requests >= 300 and "budget" in plan.result.ended


def test_step_is_held_for_its_warm_up_its_time_enough_answers_and_until_steady() -> None:
    lim = Limits(min_answers=40, min_seconds=3, warmup=0.5, max_seconds=15)
    even = [0.5 + i * 0.05 for i in range(60)]  # 20 answers/s from the cut at 0.5 s to 3.5 s
    assert not step_done(0, 3.4, even, 0.5, lim)  # not long enough
    assert not step_done(0, 5, even[:39], 0.5, lim)  # not enough answers
    assert not step_done(0, 5, even, None, lim)  # the warm-up has not ended
    assert step_done(0, 3.5, even, 0.5, lim)
    ramping = [0.5 + i * 0.1 for i in range(10)] + [1.5 + i * 0.02 for i in range(100)]
    assert not step_done(0, 3.5, ramping, 0.5, lim)  # twice as many answers in the second half
    assert step_done(0, 15, [], 0.5, lim)  # a step that gets nothing ends anyway


def test_rest_after_a_step() -> None:
    f = step(4, 0.05, ["ok"])
    f.verdict = GOOD
    assert wait_after(f) == 0.0
    f.verdict, f.retry_after = BAD, 2.5
    assert wait_after(f) == 2.5
    f.retry_after = 1e9
    assert wait_after(f) == 60.0  # capped
    f.retry_after = math.nan  # what a server says is input: never a NaN sleep
    assert wait_after(f) == 60.0
    f.retry_after = -5.0  # a date in the past
    assert wait_after(f) == 1.0
    f.retry_after = 0.0
    assert wait_after(f) == 1.0


@pytest.mark.parametrize(
    "bad", [{"cap": 0}, {"margin": 0}, {"margin": 1.5}, {"min_seconds": math.nan}, {"max_time": -1}]
)
def test_bad_limits_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="probe:"):
        Limits(**bad)  # type: ignore[arg-type]


def test_urls_are_grouped_by_host_and_only_http() -> None:
    assert group_by_host(["http://a.test/1", "https://b.test/", "http://a.test/2"]) == {
        "a.test": ["http://a.test/1", "http://a.test/2"],
        "b.test": ["https://b.test/"],
    }
    with pytest.raises(ProbeError, match="not an http"):
        group_by_host(["ftp://a.test/"])


# ---- the profile file: written by --save, read by the throttle --------------------------


def _site(host: str, knee_c: int, goodput: float, client_bound: bool = False) -> SiteProbe:
    s = SiteProbe(host, [f"http://{host}/"])
    s.result.knee = StepFigures(concurrency=knee_c, phase="ramp", goodput=goodput)
    s.result.client_bound = client_bound
    return s


def test_save_merges_and_the_throttle_starts_from_it(tmp_path: Path) -> None:
    path = str(tmp_path / "probed.json")
    added = save_profiles(path, [_site("a.example.test", 10, 50.0), _site("b.example.test", 8, 900, True)], 0.8)
    assert set(added) == {"a.example.test"}  # a client-bound result is no knee of the site: not saved
    save_profiles(path, [_site("c.example.test", 5, 10.0)], 0.8)
    entries = probed.read(path)
    assert entries == {
        "a.example.test": {"concurrency": 8, "max_rate": 40.0},
        "c.example.test": {"concurrency": 4, "max_rate": 8.0},
    }
    settings = {"SCALE_PROBE_PROFILES": path, "SCALE_DOMAIN_PROFILES": {"c.example.test": {"max_rate": 2.0}}}
    profiles = throttle_profiles(settings)
    a = profiles.match("a.example.test")
    assert a.pattern == "a.example.test" and a.profile.concurrency == 8 and a.profile.max_rate == 40.0
    c = profiles.match("c.example.test").profile
    assert c.max_rate == 2.0 and c.concurrency == 4  # the project's own field wins, the probe fills the rest
    assert profiles.match("other.test").pattern == "default"


@pytest.mark.parametrize(
    "doc,problem",
    [
        ("not json", "not read"),
        (json.dumps([1, 2]), "no 'profiles'"),
        (json.dumps({"profiles": {"a.test": {"max_rate": "NaN"}}}), "max_rate"),
        (json.dumps({"profiles": {"a.test": {"max_rate": -1}}}), "max_rate"),
        (json.dumps({"profiles": {"a.test": {"concurrency": 1e400}}}), "concurrency"),
        (json.dumps({"profiles": {"*.a.test": {"max_rate": 1}}}), "not a host"),
        (json.dumps({"profiles": {"http://a.test/": {"max_rate": 1}}}), "not a host"),
        (json.dumps({"profiles": {"a.test": 5}}), "not an object"),
    ],
)
def test_hostile_profile_file_entries_are_skipped_with_a_warning(
    tmp_path: Path, doc: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "p.json"
    path.write_text(doc)
    problems: list[str] = []
    assert probed.read(str(path), problems) == {}
    assert len(problems) == 1 and problem in problems[0], problems
    merged = probed.merged({"default": {"max_delay": 5}}, str(path))
    assert merged == {"default": {"max_delay": 5}}
    assert [r.getMessage() for r in caplog.records if "probe profiles skipped" in r.getMessage()]


def test_a_good_entry_next_to_a_bad_one_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps({"profiles": {"a.test": {"max_rate": 3, "probed_at": 1}, "b.test": {"max_rate": math.inf}}})
    )
    problems: list[str] = []
    assert probed.read(str(path), problems) == {"a.test": {"max_rate": 3}}
    assert len(problems) == 1


def rate_site(limit: float, latency: float = 0.05) -> Callable[[int, str, float | None], StepFigures]:
    """A site refusing (429) more than ``limit`` requests/s whatever the concurrency."""

    def run(c: int, phase: str, rate: float | None) -> StepFigures:
        sent = min(c / latency, rate or math.inf)
        ok = sent <= limit
        f = StepFigures(
            c,
            phase,
            requests=int(sent * 4),
            answers=int(sent * 3),
            goodput=min(sent, limit),
            success=1.0 if ok else 0.5,
            classes={"ok": 1} if ok else {"ok": 1, "rate_limited": 1},
            p50=latency,
            p95=latency,
            in_flight=c,
            offered=sent,
            rate_ceiling=rate,
            rate_limited=not ok,
        )
        return f

    return run


def test_a_site_limited_below_one_request_at_a_time_gets_a_rate() -> None:
    site = rate_site(8.0)
    plan = Plan(Limits())
    ran = []
    while (nxt := plan.next_step()) is not None:
        c, phase, rate = nxt
        ran.append((c, phase, rate))
        plan.record(site(c, phase, rate))
    assert ran[0] == (1, "ramp", None)
    assert {c for c, _, _ in ran} == {1} and {p for _, p, _ in ran[1:]} == {"rate"}
    rates = [r for _, _, r in ran[1:]]
    assert rates[:3] == [10.0, 5.0, 7.5]  # half of the 20/s step 1 sent, halved, then bisected
    assert all(r is not None and r < 20.0 for r in rates)  # always below what was refused
    r = plan.result
    assert r.knee is not None and r.knee.phase == "rate"
    assert 0.85 * 8.0 <= r.knee.goodput <= 8.0
    assert "one request at a time" in r.ended
    assert r.recommendation("x.test", 0.8) == {"x.test": {"concurrency": 1, "max_rate": round(0.8 * r.knee.goodput, 2)}}


def test_a_site_refusing_every_rate_ends_at_the_floor() -> None:
    site = rate_site(0.0)
    plan = Plan(Limits(min_rate=1.0))
    n = 0
    while (nxt := plan.next_step()) is not None:
        plan.record(site(*nxt))
        n += 1
    assert n == 5  # 20/s refused, then 10, 5, 2.5, 1.25; 0.625 would be under min_rate
    assert plan.result.knee is None and "refuses even 1.25 request/s" in plan.result.ended
