"""Every stats key goes through ``scrapy_scale/stats_keys.py``: no module of the package
hands the stats API a key spelled in place (a string, an f-string, or a string glued to
a variable part) or spells a ``scale/...`` key anywhere else (a stats dict read, a
prefix), and every constant of ``stats_keys`` is used somewhere.

Read from the source (AST, nothing imported). A key with a variable part is a constant
of ``stats_keys`` plus the variable, or a function of ``stats_keys``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.source import parse, walk

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[2] / "scrapy_scale"
KEYS = ROOT / "stats_keys.py"

#: the stats collector's methods that take a key first (Scrapy's StatsCollector API)
STATS_API = {"get_value", "set_value", "inc_value", "max_value", "min_value"}
#: the same through a package's own wrapper, when it is reached as ``....stats.<name>``
WRAPPER_API = {"inc", "set", "max"}
#: what a scrapy-scale stats key looks like, spelled whole or as a prefix
SCALE_KEY = re.compile(r"scale/[a-z0-9_]+(/[a-z0-9_]+)*/?")


def spelled_in_place(node: ast.expr) -> bool:
    """A key written here: a string, an f-string, or a sum with a string in it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.JoinedStr):  # with some text of its own (not only {K.X}{var})
        return any(isinstance(v, ast.Constant) and v.value for v in node.values)
    if isinstance(node, ast.BinOp):
        return spelled_in_place(node.left) or spelled_in_place(node.right)
    return False


def literal_keys(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, call) of each stats call whose key is spelled in place: ``stats.inc_value("x")``,
    and the same through a bound method kept under a name (``inc = stats.inc_value``)."""
    tree = parse(source, filename)
    bound: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr in STATS_API:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bound.add(t.id)
                elif isinstance(t, ast.Attribute):
                    bound.add(t.attr)
    found = []
    for node in walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        wrapper = isinstance(f, ast.Attribute) and f.attr in WRAPPER_API and receiver(f.value) == "stats"
        if (name in STATS_API or name in bound or wrapper) and spelled_in_place(node.args[0]):
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


def receiver(node: ast.expr) -> str | None:
    """The last name of ``a.b.stats`` (``stats``), of ``stats`` itself, else None."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def scale_keys_spelled(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, text) of each string, outside docstrings, that is a whole ``scale/...`` key."""
    tree = parse(source, filename)
    docstrings = {
        id(node.body[0].value)
        for node in walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and SCALE_KEY.fullmatch(node.value)
    ]


def test_the_check_sees_every_form() -> None:
    src = (
        "from scrapy_scale import stats_keys as K\n"
        "def f(stats, n, kind):\n"
        "    stats.inc_value('scale/x')\n"  # 3
        "    stats.set_value(f'scale/{kind}', 1)\n"  # 4
        "    stats.get_value('scale/x/' + kind)\n"  # 5
        "    inc = stats.inc_value\n"
        "    inc('scale/y')\n"  # 7
        "    stats.inc_value(K.OUTCOME + kind)\n"
        "    stats.max_value(K.FRONTIER_RUN, n)\n"
        "    inc(K.RETRY + kind)\n"
        "    self.stats.inc('scale/frontier/x')\n"  # 11
        "    self.stats.set(f'{K.FRONTIER_STATE}{kind}', n)\n"
        "    counts.set('not/a/stats/key', n)\n"
        "    return _num(stats, 'scale/store/written'), 'see scale/store/written'\n"  # 14: a key
    )
    assert sorted(line for line, _ in literal_keys(src)) == [3, 4, 5, 7, 11]
    assert sorted(line for line, _ in scale_keys_spelled(src)) == [3, 5, 7, 11, 14]


def test_no_module_spells_a_stats_key_in_place() -> None:
    bad = [
        f"{path.relative_to(ROOT.parent)}:{line}: {call}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != KEYS
        for line, call in literal_keys(path.read_text(encoding="utf-8"), str(path))
    ]
    bad += [
        f"{path.relative_to(ROOT.parent)}:{line}: {text!r}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != KEYS
        for line, text in scale_keys_spelled(path.read_text(encoding="utf-8"), str(path))
    ]
    assert not bad, "stats keys spelled in place (add them to scrapy_scale/stats_keys.py):\n" + "\n".join(bad)


def test_every_stats_key_constant_is_used() -> None:
    tree = parse(KEYS.read_text(encoding="utf-8"))
    names = {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and not t.id.startswith("_")
    }
    names |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
    # a prefix that only the functions of stats_keys use is used
    used: set[str] = {
        n.id for node in tree.body if isinstance(node, ast.FunctionDef) for n in walk(node) if isinstance(n, ast.Name)
    }
    for path in ROOT.rglob("*.py"):
        if path == KEYS:
            continue
        for node in walk(parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.alias):
                used.add(node.name)
    assert sorted(names - used) == []
