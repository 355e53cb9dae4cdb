"""The garbage-collector tuning (scrapy_scale/gc_tuning.py): what it changes, that the last
engine puts it back, the settings that turn it off, and that a real crawl runs with it."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from scrapy_scale.gc_tuning import GCState, GCTuning
from scrapy_scale.testbed import Testbed
from tests.support.crawling import run_crawl


class FakeGC:
    """The part of the ``gc`` module GCState uses, recording what was done."""

    def __init__(self) -> None:
        self.threshold = (700, 10, 10)
        self.frozen = 0
        self.calls: list[str] = []

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen = 1234

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.frozen = 0

    def get_freeze_count(self) -> int:
        return self.frozen

    def get_threshold(self) -> tuple[int, int, int]:
        return self.threshold

    def set_threshold(self, *t: int) -> None:
        self.threshold = tuple(t)  # type: ignore[assignment]


@pytest.mark.pure
def test_apply_freezes_after_a_collection_and_raises_only_the_first_threshold():
    g = FakeGC()
    st = GCState(g)
    said = st.apply(True, 5000)
    assert g.calls == ["collect", "freeze"]
    assert g.threshold == (5000, 10, 10)
    assert said == "start-up heap frozen (1234 objects), generation-0 threshold 700 -> 5000"
    st.release()
    assert g.threshold == (700, 10, 10)
    assert g.calls[-1] == "unfreeze" and g.frozen == 0


@pytest.mark.pure
def test_the_last_of_several_crawls_in_one_process_puts_the_collector_back():
    g = FakeGC()
    st = GCState(g)
    st.apply(True, 5000)
    assert st.apply(True, 5000) == "already tuned by another crawl in this process"
    assert g.calls.count("freeze") == 1
    st.release()
    assert g.threshold == (5000, 10, 10) and g.frozen  # the other crawl still runs
    st.release()
    assert g.threshold == (700, 10, 10) and not g.frozen
    st.release()  # one release too many changes nothing
    assert g.threshold == (700, 10, 10) and g.calls.count("unfreeze") == 1


@pytest.mark.pure
def test_each_half_can_be_turned_off():
    g = FakeGC()
    st = GCState(g)
    assert st.apply(False, 5000) == "generation-0 threshold 700 -> 5000"
    assert "freeze" not in g.calls
    st.release()
    g2 = FakeGC()
    st2 = GCState(g2)
    assert st2.apply(True, 0) == "start-up heap frozen (1234 objects)"
    assert g2.threshold == (700, 10, 10)
    st2.release()
    assert g2.calls == ["collect", "freeze", "unfreeze"]


@pytest.mark.pure
def test_both_off_is_not_configured_and_bad_values_are_setting_errors():
    with pytest.raises(NotConfigured):
        GCTuning.from_crawler(get_crawler(settings_dict={"SCALE_GC_FREEZE": False, "SCALE_GC_THRESHOLD": 0}))
    from scrapy_scale.config import ScaleSettingError

    with pytest.raises(ScaleSettingError, match="SCALE_GC_THRESHOLD"):
        GCTuning.from_crawler(get_crawler(settings_dict={"SCALE_GC_THRESHOLD": -1}))


@pytest.mark.pure
def test_the_extension_applies_once_on_engine_start_and_releases_on_stop():
    g = FakeGC()
    st = GCState(g)
    ext = GCTuning(True, 5000, st)
    ext.engine_started()
    ext.engine_started()  # a second signal does not count twice
    assert st.active == 1 and g.threshold[0] == 5000
    ext.engine_stopped()
    ext.engine_stopped()
    assert st.active == 0 and g.threshold[0] == 700


@pytest.mark.crawl
def test_a_real_crawl_runs_with_the_collector_tuned_and_can_turn_it_off(tmp_path: Path):
    """The add-on enables it (README settings table: SCALE_GC_FREEZE, SCALE_GC_THRESHOLD)."""
    before = gc.get_threshold()
    with Testbed(hosts=1, pages=10, seed=2) as tb:
        on = run_crawl(tb, {"LOG_LEVEL": "INFO"}, tmp_path / "on", timeout=90)
        off = run_crawl(
            tb, {"LOG_LEVEL": "INFO", "SCALE_GC_FREEZE": False, "SCALE_GC_THRESHOLD": 0}, tmp_path / "off", timeout=90
        )
    assert on.returncode == 0, on.tail()
    m = re.search(
        r"garbage collector: start-up heap frozen \((\d+) objects\), generation-0 threshold 700 -> 5000", on.log
    )
    assert m, on.log[-3000:]
    assert int(m.group(1)) > 10_000  # Scrapy, Twisted and the project: far more than a handful
    assert off.returncode == 0, off.tail()
    assert "garbage collector:" not in off.log
    assert len(on.items) == len(off.items) == 10
    assert gc.get_threshold() == before  # the crawls ran in their own processes


@pytest.mark.crawl
def test_the_extension_alone_without_the_addon(tmp_path: Path):
    """README, components table: `scrapy_scale.gc_tuning.GCTuning` in EXTENSIONS works without the add-on."""
    with Testbed(hosts=1, pages=5, seed=2) as tb:
        res = run_crawl(
            tb,
            {"ADDONS": {}, "LOG_LEVEL": "INFO", "EXTENSIONS": {"scrapy_scale.gc_tuning.GCTuning": 0}},
            tmp_path,
            timeout=90,
        )
    assert res.returncode == 0, res.tail()
    assert "garbage collector: start-up heap frozen" in res.log
    assert "generation-0 threshold 700 -> 5000" in res.log
    assert len(res.items) == 5
