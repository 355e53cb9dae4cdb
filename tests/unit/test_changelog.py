"""CHANGELOG.md and the version the package reports agree."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

import scrapy_scale
from tests.support.crawling import ROOT

pytestmark = pytest.mark.pure

CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def test_newest_release_is_the_package_version():
    releases = RELEASE.findall(CHANGELOG)
    assert releases, "CHANGELOG.md has no release heading"
    assert releases[0][0] == scrapy_scale.__version__


def test_installed_metadata_reports_the_same_version():
    """setup.cfg reads the version from the package (attr:), so pip and the package agree
    once installed (`pip install -e .` again after a bump)."""
    assert metadata.version("scrapy-scale") == scrapy_scale.__version__


def test_releases_are_newest_first_and_unreleased_on_top():
    versions = [tuple(int(p) for p in v.split(".")) for v, _ in RELEASE.findall(CHANGELOG)]
    assert versions == sorted(versions, reverse=True)
    assert CHANGELOG.index("## [Unreleased]") < CHANGELOG.index(f"## [{scrapy_scale.__version__}]")
