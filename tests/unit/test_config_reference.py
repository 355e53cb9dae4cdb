"""docs/settings.md is what the settings registry generates (scrapy_scale.config.reference)."""

from __future__ import annotations

import re

import pytest

from scrapy_scale import config
from scrapy_scale.config import reference as settings_reference
from tests.support.crawling import ROOT

pytestmark = pytest.mark.pure

PAGE = ROOT / "docs" / "settings.md"


def test_settings_page_is_generated_from_the_registry():
    assert PAGE.read_text() == settings_reference.render(), (
        "docs/settings.md is stale: python -m scrapy_scale.config.reference > docs/settings.md"
    )


def test_every_setting_has_a_row_once():
    config.load_declarations()
    rows = re.findall(r"^\| `(SCALE_[A-Z0-9_]+)` \|", PAGE.read_text(), flags=re.M)
    assert sorted(rows) == sorted(config.REGISTRY)


def test_described_defaults_name_settings_the_registry_leaves_unset():
    """A default described in words must be one the code derives (the registry holds None
    or an empty value); a literal default is printed as it is."""
    config.load_declarations()
    for name, (_words, unset) in settings_reference.DESCRIBED_DEFAULTS.items():
        assert config.REGISTRY[name].default == unset, name


def test_a_component_without_a_section_is_refused(monkeypatch):
    config.load_declarations()
    monkeypatch.setitem(config.REGISTRY, "SCALE_X_TEST", config.Setting("SCALE_X_TEST", 1, int, "test", "nowhere"))
    with pytest.raises(ValueError, match="nowhere"):
        settings_reference.render()
