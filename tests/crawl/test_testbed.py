"""The testbed over real sockets: catalog, exact request log, every fault, determinism, rate limit."""

from __future__ import annotations

import email.utils
import http.client
import re
import socket
import time
from typing import Any

import pytest

from scrapy_scale.testbed import Fault, ProxySpec, Testbed, parse_faults
from scrapy_scale.testbed.faults import KINDS

pytestmark = pytest.mark.crawl


def get(
    tb: Testbed,
    host: int | str,
    path: str,
    timeout: float = 5,
    conn: http.client.HTTPConnection | None = None,
    method: str = "GET",
) -> tuple[int, dict[str, str], bytes]:
    """One request to a testbed host by its address (the Host header names the host)."""
    name = tb.hosts[host - 1] if isinstance(host, int) else host
    c = conn or http.client.HTTPConnection(tb.addresses[name], tb.port, timeout=timeout)
    try:
        c.request(method, path, headers={"Host": f"{name}:{tb.port}"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        if conn is None:
            c.close()


def parse_detail(body: bytes) -> dict[str, Any]:
    text = body.decode()

    def field(cls: str) -> str | None:
        m = re.search(rf'class="{cls}">([^<]*)<', text)
        return m.group(1) if m else None

    return {"sku": field("sku"), "title": field("title"), "price": field("price")}


@pytest.fixture
def plain() -> Any:
    with Testbed(hosts=2, pages=45, seed=7) as tb:
        yield tb


def test_hosts_addresses_and_urls(plain: Testbed) -> None:
    assert plain.hosts == ["shop1.example.test", "shop2.example.test"]
    assert plain.addresses == {"shop1.example.test": "127.0.0.2", "shop2.example.test": "127.0.0.3"}
    assert plain.start_urls == [f"http://shop{n}.example.test:{plain.port}/" for n in (1, 2)]
    s = plain.scrapy_settings()
    assert set(s) == {"TWISTED_DNS_RESOLVER", "TESTBED_HOSTS"}
    assert s["TESTBED_HOSTS"] == plain.addresses


def test_catalog_listing_detail_and_robots(plain: Testbed) -> None:
    status, _, body = get(plain, 1, "/")
    assert status == 200
    assert re.findall(r'class="item" href="(/item/\d+)"', body.decode()) == [f"/item/{i}" for i in range(1, 21)]
    assert 'class="next" href="/list/2"' in body.decode()
    _, _, last = get(plain, 1, "/list/3")
    assert re.findall(r'href="/item/(\d+)"', last.decode()) == [str(i) for i in range(41, 46)]
    assert 'class="next"' not in last.decode()
    assert get(plain, 1, "/list/4")[0] == 404
    assert get(plain, 1, "/item/46")[0] == 404
    assert get(plain, 1, "/item/0")[0] == 404
    url = f"http://shop2.example.test:{plain.port}/item/17"
    status, _, body = get(plain, 2, "/item/17")
    exp = plain.expected_item(url)
    got = parse_detail(body)
    assert status == 200 and got["sku"] == exp["sku"] and got["title"] == exp["title"]
    assert float(got["price"]) == exp["price"] and exp["url"] == url
    assert get(plain, 1, "/robots.txt")[2] == b"User-agent: *\nAllow: /\n"
    assert len(plain.detail_urls()) == 90 and url in plain.detail_urls()


def test_content_is_deterministic_per_seed() -> None:
    with (
        Testbed(hosts=1, pages=5, seed=1) as a,
        Testbed(hosts=1, pages=5, seed=1) as b,
        Testbed(hosts=1, pages=5, seed=2) as c,
    ):
        bodies = [get(tb, 1, "/item/3")[2] for tb in (a, b, c)]
    assert bodies[0] == bodies[1] != bodies[2]


def test_big_catalog_costs_no_memory() -> None:
    tb = Testbed(hosts=1, pages=1_000_000)
    with tb:
        assert get(tb, 1, "/item/999999")[0] == 200
        assert 'href="/item/1000000"' in get(tb, 1, "/list/50000")[2].decode()
        assert get(tb, 1, "/list/50001")[0] == 404


def test_request_log_is_exact(plain: Testbed) -> None:
    before = time.time()
    conn = http.client.HTTPConnection(plain.addresses[plain.hosts[0]], plain.port, timeout=5)
    sent = []
    for path in ["/", "/item/1", "/item/1", "/nope", "/robots.txt", "/list/2?x=1"]:
        sent.append((1, path, get(plain, 1, path, conn=conn)[0]))
    conn.close()
    for path in ["/item/2", "/item/3"]:  # new connection each
        sent.append((2, path, get(plain, 2, path)[0]))
    sent.append((2, "/item/4", get(plain, 2, "/item/4", method="HEAD")[0]))
    log = plain.log
    assert len(log) == len(sent) == 9
    for rec, (host, path, status) in zip(log, sent, strict=True):
        assert (rec.host, rec.path, rec.status, rec.egress, rec.client) == (
            plain.hosts[host - 1],
            path,
            status,
            None,
            "127.0.0.1",
        )
        assert before <= rec.time <= time.time()
    assert [r.kind for r in log] == ["ok", "ok", "ok", "not_found", "robots", "ok", "ok", "ok", "ok"]
    assert [r.attempt for r in log][:3] == [1, 1, 2]
    assert len({r.conn for r in log[:6]}) == 1 and len({r.conn for r in log[6:]}) == 3
    assert log[-1].method == "HEAD"
    c = plain.counters
    assert c[("shop1.example.test", "ok")] == 4 and c[("shop1.example.test", 404)] == 1
    assert c[("shop2.example.test", 200)] == 3
    assert plain.count(host="shop1.example.test", status=200) == 5
    plain.clear_log()
    assert plain.log == [] and not plain.counters


# ---- faults -----------------------------------------------------------------------------


def _one(kind: str, **kw: Any) -> Testbed:
    return Testbed(hosts=2, pages=30, seed=3, faults=[Fault(kind, path="/item/5", hosts=(1,), first=1, **kw)])


@pytest.mark.parametrize("kind,status", [("500", 500), ("404", 404), ("410", 410), ("403", 403)])
def test_status_faults_fire_as_planned(kind: str, status: int) -> None:
    with _one(kind) as tb:
        assert get(tb, 1, "/item/5")[0] == status
        assert get(tb, 1, "/item/5")[0] == 200  # first=1: the second request is served
        assert get(tb, 2, "/item/5")[0] == 200  # other host untouched
        assert get(tb, 1, "/item/6")[0] == 200  # other path untouched
        assert [r.kind for r in tb.log] == [kind, "ok", "ok", "ok"]


def test_429_retry_after_seconds_and_date() -> None:
    faults = [
        Fault("429", path="/item/1", retry_after=7),
        Fault("429", path="/item/2", retry_after="date:30"),
        Fault("503", path="/item/3", retry_after=4),
        Fault("503", path="/item/4"),
    ]
    with Testbed(hosts=1, pages=10, faults=faults) as tb:
        s, h, _ = get(tb, 1, "/item/1")
        assert (s, h["retry-after"]) == (429, "7")
        s, h, _ = get(tb, 1, "/item/2")
        when = email.utils.parsedate_to_datetime(h["retry-after"]).timestamp()
        assert s == 429 and 25 <= when - time.time() <= 31
        assert h["retry-after"].endswith("GMT")
        s, h, _ = get(tb, 1, "/item/3")
        assert (s, h["retry-after"]) == (503, "4")
        s, h, _ = get(tb, 1, "/item/4")
        assert s == 503 and "retry-after" not in h
        assert [r.kind for r in tb.log] == ["429", "429", "503", "503"]


@pytest.mark.paced
def test_reset_and_hang() -> None:
    faults = [Fault("reset", path="/item/1", first=1), Fault("hang", path="/item/2", first=1)]
    with Testbed(hosts=1, pages=10, faults=faults) as tb:
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
            get(tb, 1, "/item/1")
        assert get(tb, 1, "/item/1")[0] == 200
        t0 = time.monotonic()
        with pytest.raises(socket.timeout):
            get(tb, 1, "/item/2", timeout=0.5)
        assert time.monotonic() - t0 >= 0.45
        assert get(tb, 1, "/item/2")[0] == 200
        assert [(r.kind, r.status) for r in tb.log] == [("reset", None), ("ok", 200), ("hang", None), ("ok", 200)]


@pytest.mark.paced
def test_slow_response() -> None:
    with Testbed(hosts=1, pages=10, faults=[Fault("slow", path="/item/1", delay=0.6)]) as tb:
        t0 = time.monotonic()
        s, _, body = get(tb, 1, "/item/1")
        assert time.monotonic() - t0 >= 0.58
        assert (
            s == 200
            and parse_detail(body)["sku"] == tb.expected_item(f"http://shop1.example.test:{tb.port}/item/1")["sku"]
        )
        t0 = time.monotonic()
        get(tb, 1, "/item/2")
        assert time.monotonic() - t0 < 0.5
        assert [r.kind for r in tb.log] == ["slow", "ok"]


def test_a_held_gate_keeps_every_answer_until_released() -> None:
    import threading

    with Testbed(hosts=2, pages=10) as tb:
        tb.hold()
        got: list[int] = []
        threads = [threading.Thread(target=lambda h=h: got.append(get(tb, h, "/item/1")[0])) for h in (1, 2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(tb.log) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(tb.log) == 2 and got == []  # both asked, neither answered
        assert tb.release() == 2
        for t in threads:
            t.join(5)
        assert got == [200, 200]
        assert get(tb, 1, "/item/2")[0] == 200  # open from now on


def test_block_empty_and_layout_after_page_n() -> None:
    faults = parse_faults("block:/item/1;empty:/item/2;layout:/item/*,after=20;layout:/item/*,after=10,variant=missing")
    with Testbed(hosts=1, pages=30, faults=faults) as tb:
        s, _, body = get(tb, 1, "/item/1")
        assert s == 200 and b"challenge" in body and parse_detail(body)["sku"] is None
        assert get(tb, 1, "/item/2")[:3:2] == (200, b"")
        assert parse_detail(get(tb, 1, "/item/10")[2])["price"] is not None  # not after 10
        missing = parse_detail(get(tb, 1, "/item/11")[2])
        assert missing["sku"] and missing["title"] and missing["price"] is None
        _, _, renamed = get(tb, 1, "/item/21")
        assert parse_detail(renamed) == {"sku": None, "title": None, "price": None}
        assert b'class="product-code"' in renamed and b'class="cost"' in renamed
        assert get(tb, 1, "/list/2")[0] == 200  # layout faults touch detail pages only
        assert [r.kind for r in tb.log] == ["block", "empty", "ok", "layout", "layout", "ok"]


def test_nth_request_plan() -> None:
    with Testbed(hosts=1, pages=10, faults="500:/item/5,nth=3") as tb:
        statuses = [get(tb, 1, "/item/5")[0] for _ in range(5)]
        assert statuses == [200, 200, 500, 200, 200]
        assert [get(tb, 1, "/item/6")[0] for _ in range(3)] == [200, 200, 200]


def _kinds(seed: int, n: int = 120) -> list[str]:
    with Testbed(hosts=2, pages=60, seed=seed, faults="429:/item/*,p=0.2,retry_after=1;500,p=0.1") as tb:
        for i in range(1, n // 2 + 1):
            get(tb, 1 + i % 2, f"/item/{i}")
            get(tb, 1 + i % 2, f"/item/{i}")
        return [r.kind for r in tb.log]


def test_probabilistic_faults_same_for_same_seed() -> None:
    a, b, c = _kinds(1), _kinds(1), _kinds(2)
    assert a == b
    assert a != c
    assert 10 <= a.count("429") <= 40 and 3 <= a.count("500") <= 25  # ~24 and ~10 expected


def test_sticky_probability_is_per_path() -> None:
    with Testbed(hosts=1, pages=50, seed=5, faults="404:/item/*,p=0.3,sticky=1") as tb:
        first = [get(tb, 1, f"/item/{i}")[0] for i in range(1, 51)]
        again = [get(tb, 1, f"/item/{i}")[0] for i in range(1, 51)]
    assert first == again and 5 <= first.count(404) <= 25


def test_faults_skip_robots_unless_named() -> None:
    with Testbed(hosts=1, pages=5, faults="500") as tb:
        assert get(tb, 1, "/robots.txt")[0] == 200
        assert get(tb, 1, "/")[0] == 500
    with Testbed(hosts=1, pages=5, faults="500:/robots.txt") as tb:
        assert get(tb, 1, "/robots.txt")[0] == 500


def test_robots_disallow() -> None:
    with Testbed(hosts=1, pages=5, robots_disallow=["/item/3"]) as tb:
        assert get(tb, 1, "/robots.txt")[2] == b"User-agent: *\nDisallow: /item/3\n"


@pytest.mark.crawl
def test_a_fault_with_until_fires_for_that_long_after_its_first_request() -> None:
    """A burst: 503 for ``until`` seconds from the first request the rule selected."""
    with Testbed(hosts=1, pages=10, faults="503:/item/1,until=0.2;503:/item/2,until=600") as tb:
        assert get(tb, 1, "/item/1")[0] == 503
        assert get(tb, 1, "/item/2")[0] == 503
        time.sleep(0.3)  # past the first window; the second lasts 10 minutes
        assert get(tb, 1, "/item/1")[0] == 200
        assert get(tb, 1, "/item/2")[0] == 503
        assert get(tb, 1, "/item/3")[0] == 200  # not selected: no window starts
        tb.set_faults("503:/item/1,until=600")  # new rules: new windows
        assert get(tb, 1, "/item/1")[0] == 503


@pytest.mark.paced
def test_rate_limit_per_client() -> None:
    rate = 4
    with Testbed(hosts=2, pages=100, rate_limit=rate) as tb:
        conn = http.client.HTTPConnection(tb.addresses[tb.hosts[0]], tb.port, timeout=5)
        t0 = time.monotonic()
        first = [get(tb, 1, f"/item/{i}", conn=conn) for i in range(1, 13)]
        elapsed = time.monotonic() - t0
        ok = [s for s, _, _ in first].count(200)
        assert rate <= ok <= rate + int(elapsed * rate) + 1  # a burst of R, refilled at R/s
        limited = [h for s, h, _ in first if s == 429]
        assert limited and all(h["retry-after"] == "1" for h in limited)
        assert first[0][0] == 200 and first[-1][0] == 429
        assert get(tb, 2, "/item/1")[0] == 200  # another host: its own budget
        time.sleep(1.0 / rate + 0.05)
        assert get(tb, 1, "/item/50", conn=conn)[0] == 200  # refilled
        assert tb.count(kind="rate_limited") == len(limited)


def test_resolver_answers_testbed_names_from_setting_and_registry() -> None:
    from scrapy_scale.testbed import resolver

    def resolve(r: resolver.TestbedResolver, name: str) -> str:
        out: list[str] = []
        r.getHostByName(name).addCallback(out.append)
        return out[0]

    fixed = resolver.TestbedResolver(None, 0, 5.0, resolver.parse_hosts('{"Shop9.example.test": "127.0.0.10"}'))
    assert resolve(fixed, "shop9.example.test") == "127.0.0.10"
    a, b = Testbed(hosts=2, pages=5), Testbed(hosts=1, pages=5)
    with a:
        with b:
            assert resolve(fixed, "shop2.example.test") == "127.0.0.3"
        assert resolve(fixed, "shop1.example.test") == "127.0.0.2"  # still registered by a
    assert "shop1.example.test" not in resolver.registered()


def test_restart_keeps_ports_and_down_host_refuses() -> None:
    tb = Testbed(hosts=1, pages=5, proxies=[ProxySpec("p1")])
    with tb:
        port, pport = tb.port, tb.proxy_ports["p1"]
        assert get(tb, 1, "/item/1")[0] == 200
    with pytest.raises(ConnectionRefusedError):
        get(tb, 1, "/item/1")
    with tb:
        assert (tb.port, tb.proxy_ports["p1"]) == (port, pport)
        assert get(tb, 1, "/item/1")[0] == 200
        assert [r.attempt for r in tb.log] == [1, 2]


def test_set_faults_while_serving() -> None:
    with Testbed(hosts=1, pages=5) as tb:
        assert get(tb, 1, "/item/1")[0] == 200
        tb.set_faults("410:/item/1")
        assert get(tb, 1, "/item/1")[0] == 410
        tb.set_faults([])
        assert get(tb, 1, "/item/1")[0] == 200


def test_catalog_spider_parses_what_the_testbed_serves() -> None:
    from scrapy.http import HtmlResponse, Request

    from example_project.spiders.catalog import CatalogSpider
    from scrapy_scale import meta_keys

    spider = CatalogSpider(start_urls="http://x/")
    faults = "block:/item/2;layout:/item/3,variant=renamed;layout:/item/4,variant=missing"
    with Testbed(hosts=1, pages=25, faults=faults) as tb:

        def response(path: str) -> HtmlResponse:
            url = f"http://shop1.example.test:{tb.port}{path}"
            return HtmlResponse(url, body=get(tb, 1, path)[2], request=Request(url))

        out = list(spider.parse(response("/")))
        details = [r for r in out if r.callback == spider.parse_item]
        assert [r.url for r in details] == [f"http://shop1.example.test:{tb.port}/item/{i}" for i in range(1, 21)]
        assert all(r.meta[meta_keys.EXPECT_ITEMS] is True for r in details)
        assert [r.url.rsplit("/", 1)[1] for r in out if r.callback == spider.parse] == ["2"]
        assert list(spider.parse(response("/list/2")))[-1].url.endswith("/item/25")  # last page: no next
        ok = list(spider.parse_item(response("/item/1")))
        assert ok == [tb.expected_item(ok[0]["url"])]
        assert list(spider.parse_item(response("/item/2"))) == []  # block page
        assert list(spider.parse_item(response("/item/3"))) == []  # renamed fields
        (missing,) = spider.parse_item(response("/item/4"))
        assert missing["price"] is None and missing["sku"] == tb.expected_item(missing["url"])["sku"]


def _pattern(kind: str, seed: int) -> list[str]:
    with Testbed(hosts=1, pages=20, seed=seed, faults=[Fault(kind, path="/item/*", p=0.5, delay=0.01)]) as tb:
        for i in range(1, 17):
            try:
                get(tb, 1, f"/item/{i}", timeout=0.05 if kind == "hang" else 5)
            except (OSError, http.client.HTTPException):
                pass  # reset, hang: the log says what the testbed did
            # a client that gave up (0.05 s: a hang) sent its request; the testbed logs it when
            # its loop reads it, later on a loaded machine (CI: 14 of 16 logged, then 16)
            deadline = time.monotonic() + 10
            while len(tb.log) < i and time.monotonic() < deadline:
                time.sleep(0.01)
        return [r.kind for r in tb.log]


@pytest.mark.parametrize("kind", KINDS)
def test_every_fault_kind_repeats_for_a_seed_and_differs_for_another(kind: str) -> None:
    a, b, c = _pattern(kind, 21), _pattern(kind, 21), _pattern(kind, 22)
    assert a == b != c
    assert 3 <= a.count(kind) <= 13 and set(a) == {kind, "ok"}
