"""Settings are validated at startup with the setting's name in the error."""

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from scrapy_scale import config
from scrapy_scale.addon import Addon
from scrapy_scale.config import reference as settings_reference

pytestmark = pytest.mark.pure


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
    config.load_declarations()
    readme = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    rows = set(re.findall(r"^\| `(SCALE_[A-Z0-9_]+)` \|", readme, flags=re.M))
    missing = sorted(set(config.REGISTRY) - rows)
    assert not missing, f"settings missing from docs/settings.md: {missing}"
    stale = sorted(rows - set(config.REGISTRY))
    assert not stale, f"docs/settings.md documents settings that do not exist: {stale}"


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
        (config.as_float(0), "inf"),
        (config.as_float(), float("-inf")),
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
    config.load_declarations()  # run alone (or first on an xdist worker) the registry is not complete yet
    a, b = LIST_SETTINGS[name]
    for value in ([a, b], (a, b), f"{a},{b}", f" {a} , {b} ", f'["{a}", "{b}"]'):
        assert _normal(name, value) == [a, b], value
    assert _normal(name, a) == [a]
    assert Settings({name: f"{a},{b}"}).getlist(name) == [a, b]  # what Scrapy itself reads


def test_every_list_setting_is_covered():
    config.load_declarations()
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
    config.load_declarations()
    dicts = sorted(n for n, s in config.REGISTRY.items() if isinstance(s.default, dict))
    assert dicts, "no dict setting?"
    for name in dicts:
        assert type(config.get(Settings({name: "{}"}), name)) is type(config.get(Settings({}), name)), name


#: settings whose documented default is described in words, not a literal: the registry leaves
#: them unset (None, or {} for SCALE_STORE_FIELDS) and the code derives the value (checked
#: by test_derived_defaults_are_what_the_readme_describes where the rule is a plain function)
DESCRIBED_DEFAULTS = settings_reference.DESCRIBED_DEFAULTS
#: a literal default: `value`, optionally followed by a note in parentheses, e.g. `0` (off)
LITERAL_CELL = re.compile(r"^`([^`]+)`(?: \(([^)]+)\))?$")


def readme_defaults() -> dict[str, str]:
    """setting -> the default cell of docs/settings.md, as written."""
    readme = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    return dict(re.findall(r"^\| `(SCALE_[A-Z0-9_]+)` \| ([^|]+?) \|", readme, flags=re.M))


def _literal(text: str) -> object:
    """`True`, `3`, `0.5`, `["http", "https"]` as Python values; a bare word (`wait`, `.scale`) as a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def test_every_readme_default_is_the_registry_default():
    """docs/settings.md: the default column says what a crawl gets when the setting is unset."""
    config.load_declarations()
    cells = readme_defaults()
    assert set(cells) == set(config.REGISTRY)  # (names: test_every_setting_is_in_the_readme_table)
    wrong = []
    for name, cell in sorted(cells.items()):
        default = config.REGISTRY[name].default
        if name in DESCRIBED_DEFAULTS:
            words, unset = DESCRIBED_DEFAULTS[name]
            if (cell, default) != (words, unset):
                wrong.append(f"{name}: docs/settings.md {cell!r}, registry {default!r}; expected {words!r}, {unset!r}")
            continue
        if cell == "off":  # no value: the feature is off unless set
            if default is not None:
                wrong.append(f"{name}: docs/settings.md says off, registry {default!r}")
            continue
        m = LITERAL_CELL.match(cell)
        if not m:
            wrong.append(f"{name}: docs/settings.md default {cell!r} is neither a literal nor in DESCRIBED_DEFAULTS")
            continue
        value, note = _literal(m.group(1)), m.group(2)
        if value != default or type(value) is not type(default):  # 3 is not 3.0 in the table either
            wrong.append(f"{name}: docs/settings.md {m.group(1)}, registry {default!r}")
        mib = re.fullmatch(r"(\d+) MiB", note or "")
        if mib and int(mib.group(1)) * 2**20 != default:
            wrong.append(f"{name}: docs/settings.md says {note}, registry {default!r}")
    assert not wrong, "\n".join(wrong)
    assert not set(DESCRIBED_DEFAULTS) - set(cells), "DESCRIBED_DEFAULTS names a setting the table lacks"


def test_derived_defaults_are_what_the_readme_describes(tmp_path):
    """The word-described defaults of DESCRIBED_DEFAULTS, as the code derives them."""
    from scrapy.utils.test import get_crawler

    from scrapy_scale.frontier.settings import frontier_url
    from scrapy_scale.quality.pipeline import quarantine_name
    from scrapy_scale.quality.report_build import history_name, quality_dir
    from scrapy_scale.storage.pipeline import StorePipeline
    from scrapy_scale.throttle.settings import throttle_url

    config.load_declarations()
    state, jobdir = tmp_path / "state", tmp_path / "jobdir"
    s = Settings({"SCALE_STATE_DIR": str(state)})
    assert frontier_url(s) == f"sqlite:///{state}/frontier.db"
    assert frontier_url(Settings({"SCALE_STATE_DIR": str(state), "JOBDIR": str(jobdir)})) == (
        f"sqlite:///{jobdir}/frontier.db"
    )
    assert throttle_url(s) == f"sqlite:///{state}/throttle.db"
    redis = "redis://127.0.0.1:6379/0"
    assert throttle_url(Settings({"SCALE_FRONTIER_URL": redis})) == redis
    assert quality_dir(s, "shop") == f"{state}/quality/shop"
    c = Settings({"SCALE_STORE_COLLECTION": "things"})
    assert (quarantine_name(c), history_name(c)) == ("things_quarantine", "things_quality_runs")
    store = StorePipeline(
        get_crawler(settings_dict={"SCALE_STATE_DIR": str(state), "SCALE_STORE_COLLECTION": "things"})
    )
    assert store.url == f"sqlite:///{state}/items.sqlite"
    assert store.dead_collection == "things_dead_letter"
    readme_fields = re.findall(r"`(\w+)`", DESCRIBED_DEFAULTS["SCALE_STORE_FIELDS"][0])
    assert list(store.fields.values()) == readme_fields


def test_a_non_finite_retry_after_max_stops_the_crawl_at_startup() -> None:
    """Review of issue 19 item 4: SCALE_RETRY_AFTER_MAX = inf passed and capped nothing."""
    config.load_declarations()
    with pytest.raises(config.ScaleSettingError, match="SCALE_RETRY_AFTER_MAX.*finite"):
        config.validate_all({"SCALE_RETRY_AFTER_MAX": "inf"}, read_sources=False)
