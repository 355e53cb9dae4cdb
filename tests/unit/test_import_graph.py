"""The import graph of ``scrapy_scale``, built from the source (AST, nothing imported):
no import circle, and no package imports another package's private (``_x``) names.

Every import statement counts, at any depth: one inside a function closes a circle as
surely as one at the top (it only runs later), and imports under ``if TYPE_CHECKING:``
count too (a circle there is a circle of the design, though it never runs).
``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.support.source import parse, walk

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[2] / "scrapy_scale"


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in root.rglob("*.py")}


def is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods[name].name == "__init__.py"


def resolve(node: ast.ImportFrom, here: str, mods: dict[str, Path]) -> str:
    """The absolute module an ImportFrom reads from."""
    if not node.level:
        return node.module or ""
    base = here.split(".")
    if not is_package(here, mods):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, at any depth (functions, classes, if/try)."""
    return [n for n in walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def imported(path: Path, here: str, mods: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module read from, name taken or None) for each import of ``path``, absolute; any
    module, in the package or not (``prometheus_client``, ``scrapy``...)."""
    out: list[tuple[str, str | None]] = []
    for node in import_statements(parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.extend((a.name, None) for a in node.names)
        else:
            src = resolve(node, here, mods)
            out.extend((src, a.name) for a in node.names)
    return out


def build(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> modules of the package it imports, private names imported across its
    sub-packages) for the package at ``root``."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    for name, path in mods.items():
        for src, taken in imported(path, name, mods):
            if src not in mods:
                continue
            sub = f"{src}.{taken}"
            target = sub if taken is not None and sub in mods else src
            if target != name:
                edges[name].add(target)
            if taken and taken.startswith("_") and not taken.startswith("__") and package_of(src) != package_of(name):
                private.append(f"{name} imports {src}.{taken}")
    return edges, private


@functools.cache  # read once for the tests below (they do not change it)
def graph() -> tuple[dict[str, set[str]], list[str]]:
    return build(ROOT)


def package_of(module: str) -> str:
    """The package a module belongs to: ``scrapy_scale.<package>`` (or the module itself)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_circle() -> None:
    edges, _ = graph()
    assert len(edges) > 100  # the whole package was read
    loops = cycles(edges)
    assert not loops, "import circles (imports at any depth):\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_no_package_imports_another_packages_private_names() -> None:
    _, private = graph()
    assert not private, "\n".join(private)


def test_the_checks_see_a_loop_and_a_private_import() -> None:
    """The two checks find what they look for (a graph with a loop, a private import)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = parse("from scrapy_scale.frontier.store import _x\nif X:\n    import os\ndef f():\n    import sys\n")
    got = import_statements(tree)
    assert [type(n).__name__ for n in got] == ["ImportFrom", "Import", "Import"]


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_a_circle_closed_by_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    """A tiny package where ``a`` imports ``b`` at the top and ``b`` imports ``a`` only
    inside a function (the way the three former circles were broken): one circle. The
    same package with ``b``'s import gone has none."""
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "def late():\n    from pkg.a import thing\n    return thing\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from pkg.sub import d\n",
        "pkg/sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n",
    }
    root = write_package(tmp_path / "circle", files)
    edges, _ = build(root)
    assert edges["pkg.b"] == {"pkg.a"}  # the function-level import is an edge
    assert cycles(edges) == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]
    files["pkg/b.py"] = "def late():\n    return 1\n"
    files["pkg/sub/d.py"] = ""
    edges, _ = build(write_package(tmp_path / "none", files))
    assert cycles(edges) == []


def test_the_monitor_reads_the_frontiers_public_status() -> None:
    mods = modules()
    for name, path in mods.items():
        if not name.startswith("scrapy_scale.monitor"):
            continue
        used = {
            src if taken is None else (f"{src}.{taken}" if f"{src}.{taken}" in mods else src)
            for src, taken in imported(path, name, mods)
        }
        backends = {m for m in used if m.startswith("scrapy_scale.frontier.backends")}
        assert not backends and "scrapy_scale.frontier.ops.cli_ops" not in used, (name, sorted(used))


# ---- the claims docs/architecture.md makes about imports ---------------------------------


def importers(target: str) -> set[str]:
    """The modules of scrapy_scale that import ``target`` or anything under it (a module of
    the package, or another distribution's: ``prometheus_client``), at any depth."""
    mods = modules()
    out = set()
    for name, path in mods.items():
        for src, taken in imported(path, name, mods):
            full = f"{src}.{taken}" if taken else src
            if any(m == target or m.startswith(target + ".") for m in (src, full)):
                out.add(name)
    return out


def test_prometheus_client_is_imported_by_the_four_monitor_modules_the_map_names() -> None:
    assert importers("prometheus_client") == {
        "scrapy_scale.monitor.exposition",
        "scrapy_scale.monitor.export",
        "scrapy_scale.monitor.metrics",
        "scrapy_scale.monitor.extension",
    }


def test_the_store_interfaces_import_no_backend() -> None:
    edges, _ = graph()
    assert not {m for m in edges["scrapy_scale.frontier.store"] if m.startswith("scrapy_scale.frontier.backends")}
    assert edges["scrapy_scale.storage.backends.base"].isdisjoint(
        {"scrapy_scale.storage.backends", "scrapy_scale.storage.backends.sqlite", "scrapy_scale.storage.backends.mongo"}
    )
    assert "scrapy_scale.storage.backends" not in str(edges["scrapy_scale.storage.settings"])


def test_transit_serves_the_frontier_slots_and_the_throttle_routes() -> None:
    assert importers("scrapy_scale.transit") == {
        "scrapy_scale.frontier.scheduling.slot_transit",
        "scrapy_scale.throttle.routing",
    }


def test_the_scheduling_units_never_import_the_scheduler() -> None:
    users = importers("scrapy_scale.frontier.scheduling.scheduler")
    assert users == {"scrapy_scale.frontier"}  # the lazy Scheduler of the package


def test_only_redis_open_makes_a_redis_client() -> None:
    makers = {"Redis", "RedisCluster", "StrictRedis", "from_url"}
    found: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in walk(parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                if func.split(".")[-1] in makers and (func.startswith("redis") or func in makers):
                    found.setdefault(name, []).append(func)
    assert "scrapy_scale.redis_open" in found  # the check sees the calls it looks for
    assert set(found) == {"scrapy_scale.redis_open"}, found
