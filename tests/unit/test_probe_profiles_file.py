"""SCALE_PROBE_PROFILES read back: a probed entry never paces a host faster than the
project's own profiles would, and a hostile file is skipped with one warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from scrapy_scale.probe.report import saved_profiles
from scrapy_scale.throttle import probed
from scrapy_scale.throttle.profiles import Profiles

pytestmark = pytest.mark.pure

FAST = {"concurrency": 16, "max_rate": 50.0}


def probe_file(tmp_path: Path, profiles: dict[str, object]) -> str:
    path = tmp_path / "probed.json"
    path.write_text(json.dumps({"profiles": profiles}))
    return str(path)


@pytest.mark.parametrize(
    "project",
    [
        {"*.shop.test": {"max_rate": 1.0, "concurrency": 1}},  # a wildcard paces the host
        {"default": {"max_rate": 1.0, "concurrency": 1}},  # the project's default paces it
        {"www.shop.test": {"min_delay": 0.5}, "default": {"max_rate": 1.0, "concurrency": 1}},  # inherited
    ],
)
def test_a_probed_entry_never_raises_the_projects_pace(
    tmp_path: Path, project: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    path = probe_file(tmp_path, {"www.shop.test": FAST})
    before = Profiles.parse(project).match("www.shop.test").profile
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.throttle.probed"):
        after = Profiles.parse(probed.merged(project, path)).match("www.shop.test").profile
    assert before.max_rate == after.max_rate == 1.0
    assert before.concurrency == after.concurrency == 1
    assert before.min_delay == after.min_delay


def test_a_host_paced_with_its_wider_unit_is_not_split_from_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = {"*.shop.test": {"max_rate": 10.0}}
    path = probe_file(tmp_path, {"www.shop.test": {"max_rate": 5.0}, "other.test": {"max_rate": 5.0}})
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.throttle.probed"):
        profiles = Profiles.parse(probed.merged(project, path))
    m = profiles.match("www.shop.test")
    assert m.pattern == "*.shop.test" and m.profile.max_rate == 10.0  # still the one shared unit
    assert profiles.match("other.test").profile.max_rate == 5.0  # a host the project leaves to default
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'www.shop.test': paced with the project's '*.shop.test' profile" in warnings[0]


def test_a_probed_entry_lowers_a_default_that_sets_nothing(tmp_path: Path) -> None:
    path = probe_file(tmp_path, {"www.shop.test": FAST})
    m = Profiles.parse(probed.merged({}, path)).match("www.shop.test")
    assert m.pattern == "www.shop.test" and (m.profile.concurrency, m.profile.max_rate) == (16, 50.0)


def test_the_projects_own_spelling_of_the_host_is_merged_not_doubled(tmp_path: Path) -> None:
    path = probe_file(tmp_path, {"www.shop.test": FAST})
    project = {"WWW.Shop.test.": {"max_rate": 2.0}}
    m = Profiles.parse(probed.merged(project, path)).match("www.shop.test")  # no "given twice" error
    assert m.profile.max_rate == 2.0 and m.profile.concurrency == 16


def test_a_file_nested_too_deep_is_skipped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000)
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.throttle.probed"):
        assert probed.merged({"default": {"max_rate": 1.0}}, str(path)) == {"default": {"max_rate": 1.0}}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "RecursionError" in warnings[0]


def test_save_to_a_file_nested_too_deep_is_refused_as_not_a_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000)
    with pytest.raises(ValueError, match="cannot be read as a probe profile file"):
        saved_profiles(str(path))  # `probe --save` says so before probing, as a usage error
