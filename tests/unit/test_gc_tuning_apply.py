"""The garbage-collector tuning (scrapy_scale/gc_tuning.py): what it changes, that the last
engine puts it back, the settings that turn it off, and that a real crawl runs with it."""

from __future__ import annotations

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from scrapy_scale.gc_tuning import GCState, GCTuning

pytestmark = pytest.mark.pure


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


def test_both_off_is_not_configured_and_bad_values_are_setting_errors():
    with pytest.raises(NotConfigured):
        GCTuning.from_crawler(get_crawler(settings_dict={"SCALE_GC_FREEZE": False, "SCALE_GC_THRESHOLD": 0}))
    from scrapy_scale.config import ScaleSettingError

    with pytest.raises(ScaleSettingError, match="SCALE_GC_THRESHOLD"):
        GCTuning.from_crawler(get_crawler(settings_dict={"SCALE_GC_THRESHOLD": -1}))


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
