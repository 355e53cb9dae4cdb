"""Every ``pip install ...[extras]`` the README, the docs and the tool's own messages
show names extras that setup.cfg declares (docs/scrapyd.md said ``[redis,mongo]`` while
the extra was ``mongodb``: pip installs the package and only warns, without pymongo)."""

from __future__ import annotations

import configparser
import re

import pytest

from tests.support.crawling import ROOT

pytestmark = pytest.mark.pure

#: a pip install line's extras (pip install -e ".[all,test]", 'scrapy-scale[probe]', .[bench]),
#: or extras named in prose ("its extras, e.g. `[redis,mongo]`")
PIP_EXTRAS = re.compile(r"(?:pip install [^\n`]*?|extras?\b[^`\n]*`)\[([\w,\- ]+)\]")


def declared_extras() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return set(cfg["options.extras_require"])


def install_lines() -> list[tuple[str, str]]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
    files += sorted((ROOT / "scrapy_scale").rglob("*.py"))
    return [
        (f"{f.relative_to(ROOT)}: {m.group(0)}", extra.strip())
        for f in files
        for m in PIP_EXTRAS.finditer(f.read_text())
        for extra in m.group(1).split(",")
    ]


def test_every_pip_install_names_extras_that_exist():
    lines = install_lines()
    assert len(lines) >= 8, lines  # the pattern still finds them
    assert any("docs/scrapyd.md" in where for where, _ in lines)
    extras = declared_extras()
    assert [(where, extra) for where, extra in lines if extra not in extras] == []


def test_mongo_is_the_mongodb_extra_under_another_name():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]
    assert extras["mongo"].split() == extras["mongodb"].split() == ["pymongo>=4.6"]
