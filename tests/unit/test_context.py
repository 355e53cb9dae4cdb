"""The per-crawler context: typed offers, and one shared object per class and crawler."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from scrapy.utils.test import get_crawler

from scrapy_scale.context import ScaleContext
from tests.support.source import parse

pytestmark = pytest.mark.pure


class Counted:
    made = 0

    def __init__(self) -> None:
        Counted.made += 1


def test_shared_makes_one_object_per_class_and_crawler() -> None:
    a, b = get_crawler(), get_crawler()
    Counted.made = 0
    first = ScaleContext.of(a).shared(Counted, Counted)
    assert ScaleContext.of(a).shared(Counted, Counted) is first
    assert Counted.made == 1
    other = ScaleContext.of(b).shared(Counted, Counted)
    assert other is not first and Counted.made == 2
    # another class is another object
    assert ScaleContext.of(a).shared(dict, dict) == {}


def test_offers_are_typed_fields_not_string_keys() -> None:
    names = {f.name for f in dataclasses.fields(ScaleContext)}
    assert "extra" not in names
    assert {"pacer", "egress_pool", "browser", "store", "snapshot_index", "quality_figures", "quality_report"} <= names
    ctx = ScaleContext.of(get_crawler())
    assert ctx.pacer is None and ctx.egress_pool is None and ctx.browser is None


def test_the_outcome_core_and_the_exit_request_live_in_the_one_registry() -> None:
    """``OutcomeCore.of`` and a crawl's exit status request are kept in the crawler's
    ScaleContext (one per-crawler registry), one per crawler."""
    from scrapy_scale import exitcode
    from scrapy_scale.outcomes.core import OutcomeCore

    a, b = get_crawler(), get_crawler()
    core = OutcomeCore.of(a)
    assert OutcomeCore.of(a) is core and OutcomeCore.of(b) is not core
    assert ScaleContext.of(a).shared(OutcomeCore, lambda: pytest.fail("made again")) is core
    try:
        exitcode.request(3, "a's reason", a)
        exitcode.request(2, "lower", a)
        assert ScaleContext.of(a).exit_request == (3, "a's reason") == exitcode.requested(a)
        assert exitcode.requested(b) is None and ScaleContext.of(b).exit_request is None
    finally:
        exitcode.reset()


def module_and_class_level_weak_maps() -> list[str]:
    """Weak maps assigned at module or class level in scrapy_scale (a per-crawler map of
    one's own would be one): ``module.name``."""
    root = Path(__file__).resolve().parents[2] / "scrapy_scale"
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = parse(path.read_text(encoding="utf-8"), str(path))
        bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
        for body in bodies:
            for stmt in body:
                if isinstance(stmt, ast.AnnAssign | ast.Assign) and stmt.value is not None:
                    if "Weak" in ast.unparse(stmt.value):
                        target = stmt.target if isinstance(stmt, ast.AnnAssign) else stmt.targets[0]
                        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
                        found.append(f"{module}.{ast.unparse(target)}")
    return found


def test_no_per_crawler_map_outside_the_context() -> None:
    """The only long-lived weak maps: the contexts themselves, and the codec's method names
    per spider (not per crawler)."""
    assert sorted(module_and_class_level_weak_maps()) == [
        "scrapy_scale.context._contexts",
        "scrapy_scale.frontier.records.codec._METHOD_NAMES",
    ]
