"""Settings are validated at startup with the setting's name in the error."""

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from scrapy_scale import config
from scrapy_scale.addon import Addon


def test_unknown_scale_setting_is_rejected_with_suggestion():
    with pytest.raises(config.ScaleSettingError, match="SCALE_JOBB: unknown setting; did you mean SCALE_JOB"):
        config.validate_all(Settings({"SCALE_JOBB": "x"}))


def test_bad_value_names_the_setting():
    with pytest.raises(config.ScaleSettingError, match="^SCALE_ENABLED: expected a boolean"):
        Addon().update_settings(Settings({"SCALE_ENABLED": "maybe"}))


def test_addon_sets_polite_defaults_but_project_wins():
    s = Settings()
    s.set("CONCURRENT_REQUESTS_PER_DOMAIN", 2, priority="project")
    Addon().update_settings(s)
    assert s.getbool("ROBOTSTXT_OBEY") is True
    assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 2


def test_addon_off_switch_changes_nothing():
    s = Settings({"SCALE_ENABLED": False})
    Addon().update_settings(s)
    assert not s.getbool("ROBOTSTXT_OBEY")


def test_every_setting_is_in_the_readme_table():
    config._load_declarations()
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    rows = set(re.findall(r"^\| `(SCALE_[A-Z0-9_]+)` \|", readme, flags=re.M))
    missing = sorted(set(config.REGISTRY) - rows)
    assert not missing, f"settings missing from README's table: {missing}"
    stale = sorted(rows - set(config.REGISTRY))
    assert not stale, f"README documents settings that do not exist: {stale}"


@pytest.mark.parametrize(
    "parser,value,ok",
    [
        (config.as_int(0), "3", 3),
        (config.as_float(0, 1), 0.5, 0.5),
        (config.as_url("sqlite", "redis"), "redis://h:1/0", "redis://h:1/0"),
        (config.as_list(), "a, b", ["a", "b"]),
        (config.as_dict, '{"a": 1}', {"a": 1}),
    ],
)
def test_parsers_accept(parser, value, ok):
    assert parser(value) == ok


@pytest.mark.parametrize(
    "parser,value",
    [
        (config.as_int(0), -1),
        (config.as_int(), 1.5),
        (config.as_float(0, 1), 2),
        (config.as_url("sqlite"), "mysql://x"),
        (config.as_dict, "[1]"),
        (config.as_bool, "perhaps"),
    ],
)
def test_parsers_reject(parser, value):
    with pytest.raises(ValueError):
        parser(value)


#: SCALE_* settings whose value is a list of names, and a sample name for each
LIST_SETTINGS = {
    "SCALE_BLOCK_DETECTORS": ("pkg.mod.OneDetector", "pkg.mod.Other"),
    "SCALE_CRITICAL_FIELDS": ("sku", "price"),
    "SCALE_ITEM_KEY": ("sku", "color"),
    "SCALE_FRONTIER_SCHEMES": ("http", "https"),
    "SCALE_FRONTIER_REQUEST_CLASSES": ("pkg.requests.ApiRequest", "pkg.spiders"),
    "SCALE_QUALITY_CONTENT_FIELDS": ("title", "price"),
    "SCALE_QUALITY_DUPLICATE_KEY": ("sku", "color"),
    "SCALE_QUALITY_SNAPSHOT_CLASSES": ("parse_failed", "blocked"),
}
#: list-valued settings that are not lists of names (a comma-separated string means nothing)
NOT_NAME_LISTS = {"SCALE_FAILURE_RULES"}  # a list of rule dicts


def _normal(name, value):
    """The parsed value as a plain list of names (the parsers' shapes differ)."""
    v = config.get(Settings({name: value}), name)
    if isinstance(v, dict):
        assert list(v) == ["*"], v  # no type named: every item type
        v = v["*"]
    return list(v)


@pytest.mark.parametrize("name", sorted(LIST_SETTINGS))
def test_list_settings_take_what_scrapys_getlist_takes(name):
    """A list, a tuple, a comma-separated string (as `-s NAME=a,b` gives), one name, a JSON list."""
    a, b = LIST_SETTINGS[name]
    for value in ([a, b], (a, b), f"{a},{b}", f" {a} , {b} ", f'["{a}", "{b}"]'):
        assert _normal(name, value) == [a, b], value
    assert _normal(name, a) == [a]
    assert Settings({name: f"{a},{b}"}).getlist(name) == [a, b]  # what Scrapy itself reads


def test_every_list_setting_is_covered():
    config._load_declarations()
    lists = {n for n, s in config.REGISTRY.items() if isinstance(s.default, list)}
    assert lists - NOT_NAME_LISTS <= set(LIST_SETTINGS), "a new list setting: add it to LIST_SETTINGS"


def test_item_key_per_type_and_for_every_type():
    from scrapy_scale.storage.settings import as_item_key

    assert as_item_key("sku") == {"*": ["sku"]}
    assert as_item_key('["sku"]') == {"*": ["sku"]}
    assert as_item_key({"Product": "sku,color", "*": ["url"]}) == {"Product": ["sku", "color"], "*": ["url"]}
    assert as_item_key('{"Product": ["sku"]}') == {"Product": ["sku"]}
    assert as_item_key("") == {}
    for bad in ("[]", '{"Product": ""}', "[1]", 5):
        with pytest.raises(ValueError):
            as_item_key(bad)


def test_every_dict_setting_takes_its_json_from_the_command_line():
    """`-s NAME={...}` gives a string: every dict-valued setting parses it as JSON."""
    config._load_declarations()
    dicts = sorted(n for n, s in config.REGISTRY.items() if isinstance(s.default, dict))
    assert dicts, "no dict setting?"
    for name in dicts:
        assert type(config.get(Settings({name: "{}"}), name)) is type(config.get(Settings({}), name)), name
