"""A chain's attempt number read back from a stored request's meta is untrusted input."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scrapy_scale import meta_keys
from tests.support.source import parse, walk

pytestmark = pytest.mark.pure

PACKAGE = Path(__file__).resolve().parents[2] / "scrapy_scale"


@pytest.mark.parametrize("raw", ["x", float("nan"), float("inf"), -3, 0, 1e12, None, [2], "1e400"])
def test_a_hostile_attempt_counts_as_the_default(raw, caplog):
    meta_keys._warned_attempt = False
    assert meta_keys.attempt_of({meta_keys.ATTEMPT: raw}) == 1
    assert meta_keys.attempt_of({meta_keys.ATTEMPT: raw}, 2) == 2
    assert [r for r in caplog.records if "not an attempt number" in r.getMessage()], "warned once"


@pytest.mark.parametrize(
    "raw,got", [(1, 1), (3, 3), ("4", 4), (2.0, 2), (meta_keys.MAX_ATTEMPT, meta_keys.MAX_ATTEMPT)]
)
def test_a_good_attempt_is_read(raw, got):
    assert meta_keys.attempt_of({meta_keys.ATTEMPT: raw}) == got
    assert meta_keys.attempt_of({}) == 1


def test_the_attempt_is_read_only_through_attempt_of():
    """No module converts the stored value itself (int(meta.get(ATTEMPT)) raised on NaN or text)."""
    found, walked = [], 0
    for path in PACKAGE.rglob("*.py"):
        walked += 1
        for node in walk(parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("int", "float", "as_int"):
                if "ATTEMPT" in ast.unparse(node):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert walked > 100
    assert not found, found
