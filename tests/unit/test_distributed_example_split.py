"""examples/distributed/run.py's check of the workers' split (issue 31 part 6: the
script printed RECONCILED for shares of 79/0/21): a job of at least 20 requests per
worker where one did less than half its fair share is a problem, so the script exits 1."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.pure

RUN = Path(__file__).resolve().parents[2] / "examples" / "distributed" / "run.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("distributed_example", RUN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_issues_splits_of_420_requests_are_problems_a_fair_one_is_not() -> None:
    split = example().split_problems
    for shares in ((79, 0, 21), (12, 45, 43), (9, 42, 49)):  # percent of 420, from the issue
        problems = split({f"w{i}": 420 * p / 100 for i, p in enumerate(shares)})
        assert len(problems) == 1 and "unfair split" in problems[0], shares
    assert split({"w0": 136, "w1": 137, "w2": 147}) == []
    assert split({"w0": 71, "w1": 175, "w2": 174}) == []  # just above half of 140


def test_a_job_too_small_to_split_is_not_judged() -> None:
    split = example().split_problems
    assert split({"w0": 59, "w1": 0, "w2": 0}) == []  # under 20 requests per worker
    assert split({"w0": 60, "w1": 0, "w2": 0}) != []
    assert split({}) == []
