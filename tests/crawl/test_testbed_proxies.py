"""Testbed proxies per mode, seen from a plain HTTP client and from the targets' log."""

from __future__ import annotations

import base64
import http.client
import time

import pytest

from scrapy_scale.testbed import Fault, ProxySpec, Testbed

pytestmark = pytest.mark.crawl


def via(
    tb: Testbed,
    proxy_id: str,
    url: str,
    auth: str | None = None,
    timeout: float = 5,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, dict[str, str], bytes]:
    c = conn or http.client.HTTPConnection("127.0.0.1", tb.proxy_ports[proxy_id], timeout=timeout)
    headers = {"Proxy-Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    try:
        c.request("GET", url, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        if conn is None:
            c.close()


PROXIES = [
    ProxySpec("ok1"),
    ProxySpec("ok2", banned_by=(2,)),
    ProxySpec("dead", mode="dead"),
    ProxySpec("slow", mode="slow", delay=0.4),
    ProxySpec("flaky", mode="flaky", p=0.5),
    ProxySpec("auth", mode="auth", user="alice", password="s3cret"),
]


@pytest.fixture
def tb() -> Testbed:
    with Testbed(hosts=2, pages=40, seed=11, proxies=PROXIES) as t:
        yield t


def url(tb: Testbed, host: int, path: str) -> str:
    return f"http://shop{host}.example.test:{tb.port}{path}"


def test_healthy_proxies_are_told_apart_by_the_target(tb: Testbed) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", tb.proxy_ports["ok1"], timeout=5)
    for path in ("/item/1", "/item/2"):
        assert via(tb, "ok1", url(tb, 1, path), conn=conn)[0] == 200
    assert via(tb, "ok1", url(tb, 2, "/item/3"), conn=conn)[0] == 200  # another host, same client conn
    assert via(tb, "ok2", url(tb, 1, "/item/1"))[0] == 200
    log = tb.log
    assert [(r.host, r.path, r.egress) for r in log] == [
        ("shop1.example.test", "/item/1", "ok1"),
        ("shop1.example.test", "/item/2", "ok1"),
        ("shop2.example.test", "/item/3", "ok1"),
        ("shop1.example.test", "/item/1", "ok2"),
    ]
    assert log[0].client == "127.254.0.1" and log[3].client == "127.254.0.2"
    assert log[0].conn == log[1].conn  # proxy keeps its upstream connection alive
    assert [e.outcome for e in tb.proxy_log] == ["forwarded"] * 4
    assert tb.proxy_urls[0] == f"http://127.0.0.1:{tb.proxy_ports['ok1']}"


def test_banned_egress_gets_403_from_that_host_only(tb: Testbed) -> None:
    assert via(tb, "ok2", url(tb, 2, "/item/1"))[0] == 403
    assert via(tb, "ok2", url(tb, 1, "/item/1"))[0] == 200
    assert via(tb, "ok1", url(tb, 2, "/item/1"))[0] == 200
    assert [(r.egress, r.kind) for r in tb.log] == [("ok2", "banned"), ("ok2", "ok"), ("ok1", "ok")]


def test_dead_proxy_refuses(tb: Testbed) -> None:
    with pytest.raises(ConnectionRefusedError):
        via(tb, "dead", url(tb, 1, "/"))
    assert tb.log == [] and tb.proxy_log == []


@pytest.mark.paced
def test_slow_proxy(tb: Testbed) -> None:
    t0 = time.monotonic()
    assert via(tb, "slow", url(tb, 1, "/item/1"))[0] == 200
    assert time.monotonic() - t0 >= 0.38
    assert tb.log[0].egress == "slow"


def _flaky_pattern(seed: int) -> list[str]:
    with Testbed(hosts=1, pages=40, seed=seed, proxies=[ProxySpec("flaky", mode="flaky", p=0.5)]) as t:
        out = []
        for i in range(1, 21):
            try:
                out.append(str(via(t, "flaky", url(t, 1, f"/item/{i}"))[0]))
            except (ConnectionResetError, http.client.RemoteDisconnected):
                out.append("reset")
        assert t.count(egress="flaky") == out.count("200")  # resets never reach the target
        assert [e.outcome for e in t.proxy_log].count("reset") == out.count("reset")
        return out


def test_flaky_proxy_resets_deterministically() -> None:
    a, b, c = _flaky_pattern(1), _flaky_pattern(1), _flaky_pattern(2)
    assert a == b != c
    assert 4 <= a.count("reset") <= 16


def test_auth_proxy_requires_credentials(tb: Testbed) -> None:
    s, h, _ = via(tb, "auth", url(tb, 1, "/item/1"))
    assert s == 407 and h["proxy-authenticate"].startswith("Basic")
    assert via(tb, "auth", url(tb, 1, "/item/1"), auth="alice:wrong")[0] == 407
    assert via(tb, "auth", url(tb, 1, "/item/1"), auth="alice:s3cret")[0] == 200
    assert [r.egress for r in tb.log] == ["auth"]
    assert tb.proxy_url("auth") == f"http://alice:s3cret@127.0.0.1:{tb.proxy_ports['auth']}"


def test_connect_tunnel_keeps_the_egress_identity(tb: Testbed) -> None:
    c = http.client.HTTPConnection("127.0.0.1", tb.proxy_ports["ok2"], timeout=5)
    c.set_tunnel(f"shop1.example.test:{tb.port}")
    c.request("GET", "/item/7", headers={"Host": f"shop1.example.test:{tb.port}"})
    r = c.getresponse()
    assert r.status == 200 and b'class="sku"' in r.read()
    c.close()
    assert [(r.path, r.egress) for r in tb.log] == [("/item/7", "ok2")]
    assert [(e.method, e.outcome) for e in tb.proxy_log] == [("CONNECT", "tunnel")]


def test_proxy_never_leaves_loopback(tb: Testbed) -> None:
    assert via(tb, "ok1", "http://example.com/")[0] == 502
    assert via(tb, "ok1", "http://10.0.0.1/")[0] == 502


def test_403_fault_for_chosen_egress() -> None:
    with Testbed(
        hosts=1, pages=10, proxies=[ProxySpec("a"), ProxySpec("b")], faults=[Fault("403", egresses=("b", "direct"))]
    ) as t:
        assert via(t, "a", url(t, 1, "/item/1"))[0] == 200
        assert via(t, "b", url(t, 1, "/item/1"))[0] == 403
        assert [(r.egress, r.kind) for r in t.log] == [("a", "ok"), ("b", "403")]


def test_target_reset_reaches_the_client_through_the_proxy() -> None:
    with Testbed(hosts=1, pages=10, proxies=[ProxySpec("a")], faults="reset:/item/1,first=1") as t:
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
            via(t, "a", url(t, 1, "/item/1"))
        assert via(t, "a", url(t, 1, "/item/1"))[0] == 200


def test_tls_hosts_directly_and_through_a_connect_tunnel() -> None:
    import ssl

    ctx = ssl._create_unverified_context()
    with Testbed(hosts=2, pages=10, tls=True, proxies=[ProxySpec("p1")]) as t:
        assert t.start_urls[0] == f"https://shop1.example.test:{t.port}/"
        c = http.client.HTTPSConnection(t.addresses["shop1.example.test"], t.port, timeout=5, context=ctx)
        c.request("GET", "/item/1", headers={"Host": f"shop1.example.test:{t.port}"})
        assert c.getresponse().status == 200
        c.close()
        c = http.client.HTTPSConnection("127.0.0.1", t.proxy_ports["p1"], timeout=5, context=ctx)
        c.set_tunnel(f"shop2.example.test:{t.port}")
        c.request("GET", "/item/2")
        assert c.getresponse().status == 200
        assert [(r.host, r.egress) for r in t.log] == [("shop1.example.test", None), ("shop2.example.test", "p1")]
        assert via(t, "p1", f"https://shop2.example.test:{t.port}/")[0] == 502  # https only via CONNECT


@pytest.mark.crawl
def test_blackhole_proxy_reads_the_request_and_never_answers() -> None:
    with Testbed(hosts=1, pages=10, proxies=[ProxySpec("bh", mode="blackhole")]) as t:
        c = http.client.HTTPConnection("127.0.0.1", t.proxy_ports["bh"], timeout=0.5)
        try:
            with pytest.raises(TimeoutError):
                via(t, "bh", url(t, 1, "/item/1"), conn=c)
        finally:
            c.close()
        assert [(e.proxy, e.outcome) for e in t.proxy_log] == [("bh", "blackhole")]
        assert t.log == []  # nothing reached the target


@pytest.mark.crawl
def test_garbage_proxy_answers_bytes_that_are_not_http() -> None:
    with Testbed(hosts=1, pages=10, proxies=[ProxySpec("g", mode="garbage")]) as t:
        with pytest.raises(http.client.BadStatusLine):
            via(t, "g", url(t, 1, "/item/1"))
        assert [e.outcome for e in t.proxy_log] == ["garbage"]
        assert t.log == []


@pytest.mark.crawl
def test_midclose_proxy_closes_in_the_middle_of_the_body() -> None:
    with Testbed(hosts=1, pages=10, proxies=[ProxySpec("m", mode="midclose"), ProxySpec("ok")]) as t:
        full = via(t, "ok", url(t, 1, "/item/1"))[2]
        c = http.client.HTTPConnection("127.0.0.1", t.proxy_ports["m"], timeout=5)
        try:
            c.request("GET", url(t, 1, "/item/1"))
            r = c.getresponse()
            assert r.status == 200  # the status line and the headers came through
            with pytest.raises(http.client.IncompleteRead) as exc:
                r.read()
            assert 0 < len(exc.value.partial) < len(full)
        finally:
            c.close()
        assert [e.outcome for e in t.proxy_log] == ["forwarded", "midclose"]
        assert [r.egress for r in t.log] == ["ok", "m"]  # the target did answer
