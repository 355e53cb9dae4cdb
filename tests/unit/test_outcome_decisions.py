"""The outcome carries the decisions: no subscriber looks at a status code or a header again.

The classifier and the emitter (the outcomes package) read the response; every other
package acts on the outcome's fields: ``cls``, ``blame``, ``retry_after`` (parsed and
clamped where the outcome is made), ``slow_down`` (a 503 without ``Retry-After``) and
``responded``. An AST walk over the package (outcomes aside) fails on a subscriber that
reads an outcome's ``status``, a header, or re-parses ``Retry-After``.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from scrapy_scale.outcomes.classify import Classifier, Verdict
from scrapy_scale.outcomes.emit import OutcomeEmitter
from scrapy_scale.outcomes.model import FailureClass as C
from tests.support.source import parse, walk

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[2] / "scrapy_scale"


def _outcome_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The parameters of ``fn`` that hold an outcome: named ``outcome`` or annotated ``Outcome``."""
    names = set()
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    for a in args:
        ann = ast.unparse(a.annotation) if a.annotation is not None else ""
        if a.arg == "outcome" or "Outcome" in ann:
            names.add(a.arg)
    return names


def offences(source: str, where: str) -> list[str]:
    """What in ``source`` reads raw response data where an outcome is handled."""
    found = []
    tree = parse(source)
    for node in walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("outcomes.retry_after"):
            found.append(f"{where}:{node.lineno}: imports the Retry-After parser (use outcome.retry_after)")
        if isinstance(node, ast.Attribute) and node.attr == "retry_after_raw":
            found.append(f"{where}:{node.lineno}: reads retry_after_raw (use outcome.retry_after)")
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        names = _outcome_names(node)
        if not names:
            continue
        for sub in walk(node):
            if not isinstance(sub, ast.Attribute):
                continue
            if sub.attr == "status" and isinstance(sub.value, ast.Name) and sub.value.id in names:
                found.append(f"{where}:{sub.lineno}: {node.name} reads {sub.value.id}.status")
            if sub.attr == "headers":
                found.append(f"{where}:{sub.lineno}: {node.name} reads headers while handling an outcome")
    return found


def test_no_subscriber_reads_a_status_code_or_a_header() -> None:
    found, walked = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "outcomes" or rel.parts[0] == "testbed":
            continue  # the outcomes package makes the outcome; the testbed is the server side
        walked.add(str(rel))
        found += offences(path.read_text(), str(rel))
    # the walk read the subscribers (a wrong ROOT would walk nothing and pass)
    assert {"throttle/throttle.py", "egress/middleware.py", "monitor/metrics.py"} <= walked, sorted(walked)[:5]
    assert not found, "\n".join(found)


def test_the_walk_catches_what_it_is_for() -> None:
    """The check itself: each kind of offence is found (a check that finds nothing proves nothing)."""
    src = (
        "from scrapy_scale.outcomes.retry_after import parse_retry_after\n"
        "def on(outcome, request):\n"
        "    if outcome.status == 503: pass\n"
        "    request.headers.get('x')\n"
        "    return outcome.retry_after_raw\n"
        "def fine(o: 'Outcome'):\n"
        "    return o.status\n"
        "def unrelated(response):\n"
        "    return response.status, response.headers\n"
    )
    found = offences(src, "x.py")
    assert len(found) == 5, found
    assert any("outcome.status" in f for f in found) and any("o.status" in f for f in found)


def _emit(verdict: Verdict, cap: float = 60.0):
    crawler = get_crawler()
    return OutcomeEmitter(crawler, retry_after_max=cap).build(Request("http://shop1.example.test/x"), verdict)


@pytest.mark.parametrize(
    "seconds,expected",
    [(5.0, 5.0), (None, None), (-30.0, 0.0), (86_400.0, 60.0), (math.inf, None), (-math.inf, None), (math.nan, None)],
)
def test_the_outcome_carries_a_parsed_clamped_retry_after(seconds: float | None, expected: float | None) -> None:
    o = _emit(Verdict(C.RATE_LIMITED, "HTTP 429", retry_after=seconds, retry_after_raw="x"))
    assert o.retry_after == expected


def test_a_huge_retry_after_header_is_clamped_on_the_outcome() -> None:
    """A header of 400 digits parses to infinity: ignored, not a pause of forever."""
    req = Request("http://shop1.example.test/x")
    for raw, expected in ((b"9" * 400, None), (b"120", 60.0), (b"Wed, 01 Jan 2200 00:00:00 GMT", 60.0)):
        r = HtmlResponse(req.url, status=429, headers={"Retry-After": raw}, request=req)
        v = Classifier(clock=lambda: 1_700_000_000.0).classify_response(r, req)
        assert _emit(v).retry_after == expected, raw


def test_a_503_without_retry_after_says_slow_down_and_a_500_does_not() -> None:
    req = Request("http://shop1.example.test/x")
    c = Classifier()
    v503 = c.classify_response(HtmlResponse(req.url, status=503, request=req), req)
    v500 = c.classify_response(HtmlResponse(req.url, status=500, request=req), req)
    v503ra = c.classify_response(HtmlResponse(req.url, status=503, headers={"Retry-After": "2"}, request=req), req)
    assert (v503.cls, v503.slow_down) == (C.TRANSIENT, True)
    assert (v500.cls, v500.slow_down) == (C.TRANSIENT, False)
    assert (v503ra.cls, v503ra.slow_down, v503ra.retry_after) == (C.RATE_LIMITED, False, 2.0)
    o = _emit(v503)
    assert o.slow_down and o.cls is C.TRANSIENT
