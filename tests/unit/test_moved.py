"""Former import paths still work after their modules moved (scrapy_scale/moved.py): the
frontier's flat paths, the settings check's and the meta keys'; and every dotted path under ``scrapy_scale.frontier``
that the README and docs/ name resolves."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
from scrapy.utils.misc import load_object

from scrapy_scale.moved import MOVED

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_former_path_imports_the_moved_module_itself(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``import old`` (not imported before: its entry is taken out of ``sys.modules``) gives
    the very module at the new path, whose own spec is kept; no file is at the old path."""
    new = MOVED[old]
    assert not (REPO / (old.replace(".", "/") + ".py")).exists()
    monkeypatch.delitem(sys.modules, old, raising=False)
    moved_module = importlib.import_module(new)
    assert importlib.import_module(old) is moved_module
    assert sys.modules[old] is moved_module
    assert moved_module.__spec__ is not None and moved_module.__spec__.name == new


def test_the_former_scheduler_path_loads_as_a_scrapy_setting() -> None:
    assert load_object("scrapy_scale.frontier.scheduler.Scheduler") is load_object("scrapy_scale.frontier.Scheduler")
    from scrapy_scale.frontier.scheduling.scheduler import Scheduler

    assert load_object("scrapy_scale.frontier.Scheduler") is Scheduler


def test_unknown_frontier_paths_are_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("scrapy_scale.frontier.no_such_module")


def documented_paths() -> set[str]:
    texts = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found: set[str] = set()
    for path in texts:
        found.update(re.findall(r"scrapy_scale\.frontier(?:\.[A-Za-z_]\w*)+", path.read_text(encoding="utf-8")))
    return found


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_frontier_path_the_docs_name_resolves() -> None:
    paths = documented_paths()
    assert "scrapy_scale.frontier.Scheduler" in paths  # the docs were read
    assert len(paths) >= 5
    broken = sorted(p for p in paths if not resolves(p))
    assert not broken, broken


def test_the_former_settings_check_path_loads_as_an_extension() -> None:
    """``EXTENSIONS = {"scrapy_scale.config_check.SettingsCheck": 0}`` named a 7-line shim
    module; the shim is gone and the path still loads the check."""
    from scrapy_scale.config.check import SettingsCheck

    assert load_object("scrapy_scale.config_check.SettingsCheck") is SettingsCheck
