"""What a Redis node answers to INFO cluster is untrusted (scrapy_scale/redis_open.py):
only ``cluster_enabled`` 0 or 1 is a cluster state; anything else is a single node, said
in one warning line."""

from __future__ import annotations

import logging

import pytest

from scrapy_scale.redis_open import cluster_enabled

pytestmark = pytest.mark.pure


def test_a_cluster_state_is_read() -> None:
    assert cluster_enabled({"cluster_enabled": 1}, "redis://h")
    assert cluster_enabled({"cluster_enabled": "1"}, "redis://h")
    assert not cluster_enabled({"cluster_enabled": 0}, "redis://h")


@pytest.mark.parametrize(
    "answer",
    [{}, {"cluster_enabled": "yes\nno"}, {"cluster_enabled": float("nan")}, "cluster_enabled:1", None, [1], {"x": 2}],
)
def test_any_other_answer_is_a_single_node_with_one_warning_line(
    answer: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.redis_open"):
        assert cluster_enabled(answer, "redis://***@h:1/0") is False
    assert len(caplog.records) == 1
    msg = caplog.records[0].getMessage()
    assert "\n" not in msg and "single node" in msg and "redis://***@h:1/0" in msg
