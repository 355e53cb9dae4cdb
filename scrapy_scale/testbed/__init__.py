"""The testbed: a fault-injecting fake internet on loopback, for tests, benchmarks and the demo.

Usage::

    from scrapy_scale.testbed import Testbed, Fault, ProxySpec

    tb = Testbed(hosts=3, pages=100, seed=1,
                 faults=[Fault("429", path="/item/*", p=0.1, retry_after=2)],
                 proxies=[ProxySpec("p1"), ProxySpec("p2", mode="flaky", p=0.3)],
                 rate_limit=None, tls=False)
    with tb:                     # a thread runs its own asyncio loop (independent of Twisted)
        tb.hosts                 # ["shop1.example.test", "shop2.example.test", "shop3.example.test"]
        tb.start_urls            # ["http://shop1.example.test:PORT/", ...] (one listing root per host)
        tb.scrapy_settings()     # {"TWISTED_DNS_RESOLVER": ..., "TESTBED_HOSTS": {name: address}}
        tb.proxy_urls            # ["http://127.0.0.1:P1", ...] (user:pass@ for mode "auth")
        tb.log                   # [Served(time, host, path, method, egress, client, conn, status, kind, attempt)]
        tb.proxy_log             # [ProxyEvent(time, proxy, method, target, client, outcome)]
        tb.counters              # Counter: (host, kind) -> n and (host, status) -> n
        tb.count(kind="429")     # records of the log matching the given fields
        tb.detail_urls()         # every detail-page URL (= the items a full crawl yields)
        tb.expected_item(url)    # {"sku", "title", "price", "url"} of that detail page
        tb.set_faults("...")     # replace the fault rules while serving
        tb.hold(); tb.release()  # answers wait until release() (a test's gate)

``pages`` is the number of detail pages PER HOST. Host ``n`` is ``shop{n}.example.test``
on loopback address ``127.0.0.{n+1}``; every host listens on the same port
(``tb.port``). Proxies listen on ``127.0.0.1`` and connect to targets from
``127.254.0.{i+1}``, which is how a target knows the egress. See docs/testbed.md.
"""

from scrapy_scale.testbed.capacity import Capacity
from scrapy_scale.testbed.faults import (
    KINDS,
    PROXY_MODES,
    Fault,
    ProxySpec,
    parse_faults,
    parse_proxy,
)
from scrapy_scale.testbed.log import ProxyEvent, Served
from scrapy_scale.testbed.resolver import TestbedResolver, install_resolver
from scrapy_scale.testbed.server import Testbed

__all__ = [
    "KINDS",
    "Capacity",
    "PROXY_MODES",
    "Fault",
    "ProxyEvent",
    "ProxySpec",
    "Served",
    "Testbed",
    "TestbedResolver",
    "install_resolver",
    "parse_faults",
    "parse_proxy",
]
