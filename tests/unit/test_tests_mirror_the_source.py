"""The tests mirror the source (issue 32 item 7): one test module name in tests/unit and
tests/crawl together (a name says which file tests what), and a test reads the package
through its public queries, not its private (``_x``) attributes and methods, so a change
of the internals breaks no test whose promise still holds.

A private name is found from the source (AST, nothing imported): an attribute ``x._y``
that is not the test's own (``self``/``cls``), and ``getattr``/``setattr``/
``monkeypatch.setattr`` given ``"_y"``. What is left has a reason in :data:`ALLOWED`:
Scrapy's or the standard library's privates (no public way), a test's own objects, and
the few package internals no public query fits yet. A module-path string given to
``monkeypatch.setattr("pkg.mod._y", ...)`` is not looked at.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.support.source import parse, walk

pytestmark = pytest.mark.pure

TESTS = Path(__file__).resolve().parents[1]
TIERS = ("unit", "crawl")

_SCRAPY_PRIVATE = "Scrapy's (or scrapy-playwright's) private API that scrapy_scale.compat uses: pinned on purpose"
_WARN_ONCE = "a process-wide warn-once flag reset so the case sees its one warning (set, never asserted)"

#: (test module, private name as written) -> why no public query is used
ALLOWED: dict[tuple[str, str], str] = {
    ("crawl/test_storage_backends.py", "s._upsert"): "the MongoDB write's read/upsert race, staged at one exact "
    "interleaving: the backend's operation builder, which a public hook would expose for this test only",
    ("crawl/test_storage_backends.py", "s._items"): "the same race: the backend's collection",
    ("crawl/test_testbed_proxies.py", "ssl._create_unverified_context"): "the standard library's",
    ("unit/test_compat_signatures.py", "H._create_browser_context"): _SCRAPY_PRIVATE,
    ("unit/test_compat_signatures.py", "H._maybe_launch_browser"): _SCRAPY_PRIVATE,
    ("unit/test_compat_signatures.py", "Downloader._download"): _SCRAPY_PRIVATE,
    ("unit/test_compat_signatures.py", "exporter._get_storage"): _SCRAPY_PRIVATE,
    ("unit/test_compat_signatures.py", "DownloadHandlers._get_handler"): _SCRAPY_PRIVATE,
    ("crawl/test_metrics_watch.py", "crawler._engine"): "Scrapy's: a crawler that does not crawl has no engine "
    "(Scrapy sets it when a crawl starts), and the publisher's document reads the engine's download slots",
    ("crawl/test_metrics_watch.py", "crawler._create_engine"): "Scrapy's, as crawler._engine",
    ("crawl/test_metrics_watch.py", "ext._loop"): "the publisher's LoopingCall: that spider_opened started it "
    "(before the fix a Redis that did not answer left none), and stopped in a test with no running reactor, "
    "where spider_closed would wait for a write that only the reactor's thread pool makes",
    ("unit/test_egress_first_byte.py", "fb._check"): "a spy on the recheck of a waiting attempt, to see each "
    "bound it looked at while nothing answered (the bound itself is only seen by the cut)",
    ("unit/test_egress_first_byte.py", "first_byte._asyncio_reactor"): "no reactor in a pure test",
    ("unit/test_meta_keys_attempt.py", "meta_keys._warned_attempt"): _WARN_ONCE,
    ("unit/test_meta_keys_checks.py", "meta_keys._warned_keys"): _WARN_ONCE,
    ("unit/test_metrics_subscriber.py", "progress._warned_wait"): _WARN_ONCE,
    ("unit/test_retry_class_budgets.py", "meta_keys._warned_keys"): _WARN_ONCE,
    ("unit/test_throttle_refused_retry.py", "meta_keys._warned_keys"): _WARN_ONCE,
    ("unit/test_metrics_subscriber.py", "os._exit"): "the standard library's (a child ends without cleanup)",
    ("unit/test_shared_redis_refusals.py", "spider._callback"): "the test spider's own private method: "
    "that a private callback is refused is what is tested",
    ("unit/test_shared_redis_refusals.py", "spider._errback"): "the test spider's own, as spider._callback",
    ("unit/test_shared_redis_refusals.py", "spider._stop_testbed"): "the test spider's own, as spider._callback",
    ("unit/test_throttle_policy.py", "s._test_next_ok"): "the test's own note on the site state (the simulated "
    "site's next allowed time), not the package's",
}

#: (``hasattr`` is left out: a test that a private copy is gone asks it, rightly)
_BY_NAME = {"getattr", "setattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_accesses(source: str) -> set[str]:
    """The private names ``source`` reaches on objects other than its own, as written."""
    found: set[str] = set()
    for node in walk(parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.add(ast.unparse(node))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            fn = node.func
            named = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            name = node.args[1]
            if named in _BY_NAME and isinstance(name, ast.Constant) and isinstance(name.value, str):
                if _private(name.value):
                    found.add(f"{ast.unparse(node.args[0])}.{name.value}")
    return found


def twins(tiers: dict[str, Iterable[str]]) -> set[str]:
    """Module names found in more than one tier's folder."""
    seen: dict[str, int] = {}
    for names in tiers.values():
        for name in set(names) - {"__init__.py"}:
            seen[name] = seen.get(name, 0) + 1
    return {name for name, n in seen.items() if n > 1}


def _modules(tier: str) -> list[Path]:
    return sorted((TESTS / tier).glob("*.py"))


def test_the_checks_find_what_they_look_for() -> None:
    source = """
import os
def test(monkeypatch, pool, meta):
    self._mine, cls._ours, pool.__dict__  # the test's own, and a dunder: not counted
    assert not pool._sticky and pool.queue._by_key
    monkeypatch.setattr(meta, "_warned", False)
    getattr(pool, "_spacing")(1)
    assert not hasattr(meta, "_old_copy")  # that a private copy is gone: not counted
    monkeypatch.setattr("scrapy_scale.meta_keys._warned", False)  # a path string: not looked at
"""
    assert private_accesses(source) == {"pool._sticky", "pool.queue._by_key", "meta._warned", "pool._spacing"}
    assert twins({"unit": ["__init__.py", "test_a.py", "test_b.py"], "crawl": ["__init__.py", "test_a.py"]}) == {
        "test_a.py"
    }


def test_no_test_module_name_is_in_both_unit_and_crawl() -> None:
    found = twins({tier: [p.name for p in _modules(tier)] for tier in TIERS})
    assert not found, f"give each side a name that says what it tests: {sorted(found)}"


def test_tests_use_public_queries_and_every_allowed_private_name_is_still_used() -> None:
    seen: set[tuple[str, str]] = set()
    for tier in TIERS:
        for path in _modules(tier):
            rel = f"{tier}/{path.name}"
            seen |= {(rel, name) for name in private_accesses(path.read_text())}
    unexplained = sorted(seen - set(ALLOWED))
    assert not unexplained, (
        "a test reaches a private name: use the public query, or add a small documented one to the "
        f"source (or, with no public way, an entry with its reason in ALLOWED): {unexplained}"
    )
    stale = sorted(set(ALLOWED) - seen)
    assert not stale, f"ALLOWED names what no test reaches any more: remove {stale}"
