"""SCALE_* settings of the outcome classifier and the retry policy."""

from __future__ import annotations

from typing import Any

from scrapy_scale.config import as_float, as_list, as_str, declare

COMPONENT = "outcomes"


def _parse_rules(value: Any) -> list[Any]:
    from scrapy_scale.outcomes.classify import parse_rules

    return parse_rules(value)


def _parse_policy(value: Any) -> dict[Any, Any]:
    from scrapy_scale.outcomes.policy import parse_policy_overrides

    return parse_policy_overrides(value)


def _parse_critical(value: Any) -> dict[str, tuple[str, ...]]:
    from scrapy_scale.outcomes.parse_checks import parse_critical_fields

    return parse_critical_fields(value)


FAILURE_RULES = declare(
    "SCALE_FAILURE_RULES",
    [],
    _parse_rules,
    "Your classification rules, checked before the defaults, first match wins: a list of dicts with "
    "`class` and conditions `status`, `exception` (dotted path), `css`/`xpath`/`regex` (a block page), "
    "`domain`, `proxy`, `retry_after`; optional `reason`. See docs/outcomes.md.",
    COMPONENT,
)
RETRY_POLICY = declare(
    "SCALE_RETRY_POLICY",
    {},
    _parse_policy,
    'Per-class retry policy overrides, e.g. `{"transient": {"retries": 3, "base": 1, "cap": 30}}` '
    "(retries after the first attempt; full-jitter backoff window base*2^(n-1) capped at cap, seconds; "
    "`calm`: the window's bound while the host answers well otherwise, 0.5 s for transient and "
    "rate_limited, 0: off and the default when base or cap is set).",
    COMPONENT,
)


def _parse_late(value: Any) -> Any:
    from scrapy_scale.outcomes.late import parse_late

    return parse_late(value)


RETRY_LATE = declare(
    "SCALE_RETRY_LATE",
    {},
    _parse_late,
    'Late retries after a class\'s quick retries are spent (defaults: `{"retries": 7, "base": '
    '2.5, "cap": 600, "deadline": 3600, "classes": ["transient", "egress_failed"]}`): the k-th '
    "waits `base*2^(k-1)` s capped at `cap`, jittered between half and all of it, none past "
    "`deadline` s after the first failure (`0` = none); at a host that answers well otherwise "
    "the window doubles from the class's `calm` bound instead of `base`; one at most for a page whose host "
    "answers its other pages well (a broken page, `scale/retry/broken_page`); `0` = no late retries "
    "(also when your project sets `RETRY_TIMES` and not this). The crawl stays open while one is due.",
    COMPONENT,
)
RETRY_AFTER_MAX = declare(
    "SCALE_RETRY_AFTER_MAX",
    600.0,
    as_float(0),
    "Longest `Retry-After` honoured, in seconds; a longer one is clamped to this with a warning.",
    COMPONENT,
)
CRITICAL_FIELDS = declare(
    "SCALE_CRITICAL_FIELDS",
    [],
    _parse_critical,
    "Item fields that must be present and non-empty (a list or a comma-separated string, or a "
    "dict item class name -> list, `*` = any); an item missing one makes its request "
    "`parse_failed`.",
    COMPONENT,
)
BLOCK_DETECTORS = declare(
    "SCALE_BLOCK_DETECTORS",
    [],
    as_list(as_str),
    "Dotted paths (a list or a comma-separated string) of block-page detector classes "
    "(`scrapy_scale.outcomes.BlockPageDetector`); a detected page is `blocked`.",
    COMPONENT,
)
OUTCOME_LOG = declare(
    "SCALE_OUTCOME_LOG",
    None,
    as_str,
    "Path of a JSON-lines file that receives every outcome (one line per attempt and per final result), "
    "for debugging and tests. Off by default.",
    COMPONENT,
)
