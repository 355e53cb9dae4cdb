"""SCALE_EGRESSES and friends: sources, bad input at startup (without the password),
the file and provider refresh policy."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from scrapy_scale import config
from scrapy_scale.addon import Addon
from scrapy_scale.clock import FakeClock
from scrapy_scale.egress.settings import as_egresses
from scrapy_scale.egress.sources import Refresher

pytestmark = pytest.mark.pure


class Vendor:
    calls = 0

    def fetch(self):
        Vendor.calls += 1
        return ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]


class Broken:
    def fetch(self):
        raise ConnectionError("vendor API down for http://key:t0psecret@api.vendor.example/")


@pytest.mark.parametrize(
    "value,problem",
    [
        (["http://alice:hunter2@proxy.example"], "no port"),
        ("http://alice:hunter2@proxy.example:80/x", "no path"),
        (["socks5://alice:hunter2@proxy.example:1080"], "SOCKS"),
        ([], "set but empty"),
        ({"dc": []}, "group 'dc' is empty"),
        ("no.such.module.Provider", "cannot load the provider"),
        ("/nonexistent/proxies.txt", "cannot read the egress file"),
    ],
)
def test_bad_values_fail_at_startup_naming_the_setting_without_the_password(value, problem):
    with pytest.raises(config.ScaleSettingError) as e:
        Addon().update_settings(Settings({"SCALE_EGRESSES": value}))
    line = e.value.line()
    assert line.startswith("bad setting SCALE_EGRESSES") and problem in line
    assert "hunter2" not in line and "hunter2" not in str(e.value)


def test_sources():
    assert as_egresses("http://127.0.0.1:1, direct").kind == "static"
    assert [e.id for e in as_egresses('["direct"]').egresses] == ["direct"]
    assert as_egresses({"a": ["http://127.0.0.1:1"]}).egresses[0].group == "a"
    assert as_egresses(f"{__name__}.Vendor").provider is Vendor
    assert as_egresses(Vendor).kind == "provider"


def test_the_addon_enables_the_pool_only_when_egresses_are_set():
    s = Settings()
    Addon().update_settings(s)
    assert not any("egress" in str(k) for k in s.getdict("DOWNLOADER_MIDDLEWARES"))
    s = Settings({"SCALE_EGRESSES": ["http://127.0.0.1:3128"]})
    Addon().update_settings(s)
    mws = {getattr(k, "__name__", k): v for k, v in s.getdict("DOWNLOADER_MIDDLEWARES").items()}
    assert mws["EgressMiddleware"] == 540


def test_a_file_is_re_read_when_it_changes(tmp_path):
    f = tmp_path / "proxies.txt"
    f.write_text("http://127.0.0.1:9001\n")
    src = as_egresses(str(f))
    assert src.kind == "file" and [e.id for e in src.egresses] == ["127.0.0.1:9001"]
    clock = FakeClock()
    r = Refresher(src, 5.0, clock)
    assert [e.id for e in r.read_file()] == ["127.0.0.1:9001"]
    clock.advance(5)
    assert r.due() and r.read_file() is None  # unchanged
    f.write_text("# more now\nhttp://127.0.0.1:9001\nhttp://u:pw@127.0.0.1:9002\n")
    clock.advance(5)
    assert len(r.read_file()) == 2
    f.write_text("garbage\n")
    clock.advance(5)
    with pytest.raises(ValueError, match="line 1"):
        r.read_file()


def test_a_provider_that_raises_is_retried_with_backoff_and_logged_once_per_period():
    clock = FakeClock()
    r = Refresher(as_egresses(Broken), 60.0, clock, provider=Broken())
    warned, delays = [], []
    for _ in range(8):
        assert r.due()
        with pytest.raises(ConnectionError) as e:
            r.fetch()
        warn, msg = r.failed(e.value)
        assert "t0psecret" not in msg
        warned.append(warn)
        delays.append(r.next_at - clock.now)
        clock.now = r.next_at
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]
    assert warned == [True, False, False, False, False, False, True, True]
    ok = Refresher(as_egresses(Vendor), 60.0, clock, provider=Vendor())
    assert [e.id for e in ok.fetch()] == ["127.0.0.1:9001", "127.0.0.1:9002"]
