"""What the probe prints and draws: a client-bound result recommends nothing and says what
to do; the plot's title shows whole."""

from __future__ import annotations

import pytest

from scrapy_scale.probe import report
from scrapy_scale.probe.figures import StepFigures
from scrapy_scale.probe.policy import Limits
from scrapy_scale.probe.run import SiteProbe

pytestmark = pytest.mark.pure

ENDED = (
    "the probe was the limit at concurrency 4 (in flight 2.9 of 4; goodput 388.2/s < 402.0/s at 2 "
    "at the same p95 (4 ms); probe's event loop 25 ms late)"
)


def site(client_bound: bool) -> SiteProbe:
    s = SiteProbe("shop1.example.test", ["http://shop1.example.test/"])
    s.result.knee = StepFigures(concurrency=2, phase="ramp", goodput=402.0, verdict="good")
    s.result.steps = [s.result.knee]
    s.result.client_bound = client_bound
    s.result.ended = ENDED if client_bound else "knee between 2 (good) and 4 (bad: success 80.0%)"
    return s


def test_a_client_bound_result_recommends_nothing_and_says_what_to_do() -> None:
    bound = site(client_bound=True)
    text = report.summary(bound, Limits())
    assert "recommended" not in text and "SCALE_DOMAIN_PROFILES = " not in text, text
    assert "CLIENT-BOUND" in text and "no recommendation" in text
    assert "bigger machine" in text and "at no more than concurrency 2 (402.0/s)" in text
    assert bound.recommendation(0.8) is None and report.as_json(bound, Limits())["recommendation"] is None
    knee = site(client_bound=False)  # a knee of the site is still recommended
    assert 'recommended (knee x 0.8): SCALE_DOMAIN_PROFILES = {"shop1.example.test"' in report.summary(knee, Limits())
    assert knee.recommendation(0.8) == {"shop1.example.test": {"concurrency": 1, "max_rate": 321.6}}


def test_the_plot_title_shows_why_the_probe_ended_whole() -> None:
    title = report.plot_title(site(client_bound=True))  # cut at 110 characters it read "...at 4 at th"
    assert " ".join(title.split()) == f"shop1.example.test: {ENDED}"
    assert all(len(line) <= report.TITLE_WIDTH for line in title.splitlines())
