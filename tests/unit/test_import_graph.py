"""The import graph of ``scrapy_scale``, built from the source (AST, nothing imported):
no import loops, and no package imports another package's private (``_x``) names.

Only module-level imports count (an import inside a function runs late, on purpose);
imports under ``if TYPE_CHECKING:`` count too (a loop there is a loop of the design).
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


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


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


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports at module level, including those under module-level if/try blocks."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                found.append(stmt)
            elif isinstance(stmt, ast.If):
                walk(stmt.body)
                walk(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                walk(stmt.body)
                for h in stmt.handlers:
                    walk(h.body)
                walk(stmt.orelse)
                walk(stmt.finalbody)

    walk(tree.body)
    return found


@functools.cache  # read once for the tests below (they do not change it)
def graph() -> tuple[dict[str, set[str]], list[str]]:
    """(module -> modules of scrapy_scale it imports at module level, private names
    imported across packages)."""
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    for name, path in mods.items():
        tree = parse(path.read_text(encoding="utf-8"), str(path))
        for node in module_level_imports(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        edges[name].add(a.name)
                continue
            src = resolve(node, name, mods)
            if src not in mods:
                continue
            for a in node.names:
                sub = f"{src}.{a.name}"
                target = sub if sub in mods else src
                if target != name:
                    edges[name].add(target)
                if a.name.startswith("_") and not a.name.startswith("__") and package_of(src) != package_of(name):
                    private.append(f"{name} imports {src}.{a.name}")
    return edges, private


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


def test_the_package_has_no_import_loops() -> None:
    edges, _ = graph()
    assert len(edges) > 100  # the whole package was read
    loops = cycles(edges)
    assert not loops, "import loops (module-level imports):\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_no_package_imports_another_packages_private_names() -> None:
    _, private = graph()
    assert not private, "\n".join(private)


def test_the_checks_see_a_loop_and_a_private_import() -> None:
    """The two checks find what they look for (a graph with a loop, a private import)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = parse("from scrapy_scale.frontier.store import _x\nif X:\n    import os\ndef f():\n    import sys\n")
    got = module_level_imports(tree)
    assert [type(n).__name__ for n in got] == ["ImportFrom", "Import"]


def all_imports(path: Path, here: str, mods: dict[str, Path]) -> set[str]:
    """Every module ``path`` imports, at any level (inside functions too)."""
    out: set[str] = set()
    for node in walk(parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            src = resolve(node, here, mods)
            out.update(f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names)
    return out


def test_the_frontier_interface_imports_no_backend_and_the_monitor_reads_its_public_status() -> None:
    edges, _ = graph()
    assert not {m for m in edges["scrapy_scale.frontier.store"] if m.startswith("scrapy_scale.frontier.backends")}
    mods = modules()
    for name, path in mods.items():
        if not name.startswith("scrapy_scale.monitor"):
            continue
        used = all_imports(path, name, mods)
        backends = {m for m in used if m.startswith("scrapy_scale.frontier.backends")}
        assert not backends and "scrapy_scale.frontier.ops.cli_ops" not in used, (name, sorted(used))
