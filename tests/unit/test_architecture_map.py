"""docs/architecture.md's package map says what is where: every module or folder a row
names exists where the row says, and no table row is a wall of text (400 characters at
most). Its claims about imports are checked by tests/unit/test_import_graph.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PKG = REPO / "scrapy_scale"


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]


def package_map(text: str) -> list[tuple[list[str], list[str]]]:
    """The rows of the map under "## Packages": (the paths the first column names, the
    file and folder names the third column names)."""
    section = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table_rows(section)[1:]:  # the header row is not a package
        cells = [c.strip() for c in line.strip("|").split("|")]
        where = re.findall(r"`([^`]+)`", cells[0])
        named = [n for n in re.findall(r"`([^`\s]+)`", cells[2]) if n.endswith((".py", "/", ".lua"))]
        rows.append((where, named))
    return rows


def base_of(where: list[str]) -> Path:
    first = where[0].removeprefix("scrapy_scale/")
    path = PKG / first
    return path if path.is_dir() else PKG


def find(base: Path, name: str) -> list[Path]:
    """The files or folders ``name`` stands for in a row about ``base``: under ``base`` (a
    package's row), else at that path in the package or the repository."""
    found = list(base.glob(name)) or list(PKG.glob(name)) or list(REPO.glob(name))
    if not found and base != PKG and "/" not in name.rstrip("/"):
        found = list(base.rglob(name.rstrip("/")))
    return found


def exists(base: Path, name: str) -> bool:
    return bool(find(base, name))


def test_every_table_row_is_400_characters_at_most() -> None:
    long = [f"{len(r)}: {r[:80]}" for r in table_rows(DOC.read_text(encoding="utf-8")) if len(r) > 400]
    assert not long, long


def test_every_module_the_package_map_names_exists_where_it_says() -> None:
    rows = package_map(DOC.read_text(encoding="utf-8"))
    assert len(rows) > 20  # the map was read
    missing = []
    for where, named in rows:
        for w in where:
            if not exists(PKG, w.removeprefix("scrapy_scale/")):
                missing.append(f"row {where}: {w}")
        base = base_of(where)
        missing.extend(f"row {where}: {n}" for n in named if not exists(base, n))
    assert not missing, missing


def test_the_map_check_sees_a_module_that_is_not_there() -> None:
    text = "## Packages\n\n| a | b | c |\n|---|---|---|\n| `frontier/` (top) | - | `store.py`, `gone.py` |\n"
    ((where, named),) = package_map(text)
    assert where == ["frontier/"] and named == ["store.py", "gone.py"]
    assert exists(base_of(where), "store.py") and not exists(base_of(where), "gone.py")


def test_every_package_module_is_on_the_map() -> None:
    """Each module of the package (not private, not ``__init__``/``__main__``, not a
    package's ``settings.py``, which the text below the map covers) is named by a row."""
    named: set[Path] = set()
    for where, names in package_map(DOC.read_text(encoding="utf-8")):
        base = base_of(where)
        for n in names + [w.removeprefix("scrapy_scale/") for w in where]:
            for path in find(base, n) + find(PKG, n):
                named.add(path.resolve())
    unnamed = [
        str(path.relative_to(PKG))
        for path in sorted(PKG.rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py", "settings.py")
        and not path.name.startswith("_")
        and path.resolve() not in named
    ]
    assert not unnamed, unnamed
