"""A Scrapy DNS resolver that knows the testbed's host names.

Set ``TWISTED_DNS_RESOLVER = "scrapy_scale.testbed.resolver.TestbedResolver"`` and
``TESTBED_HOSTS = {"shop1.example.test": "127.0.0.2", ...}`` (a dict, or the same as a
JSON string, e.g. from ``-s``); :meth:`Testbed.scrapy_settings` returns exactly that.
Names not in the mapping (nor in a testbed started in this process, see
:func:`register`) go to Scrapy's default caching threaded resolver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer

RESOLVER_PATH = "scrapy_scale.testbed.resolver.TestbedResolver"
HOSTS_SETTING = "TESTBED_HOSTS"

#: names of testbeds started in this process (Testbed.start registers, stop removes);
#: counted, since two running testbeds share names (host n is always 127.0.0.{n+1})
_REGISTRY: dict[str, str] = {}
_REFS: dict[str, int] = {}


def register(mapping: Mapping[str, str]) -> None:
    for name, addr in mapping.items():
        _REGISTRY[name] = addr
        _REFS[name] = _REFS.get(name, 0) + 1


def unregister(mapping: Mapping[str, str]) -> None:
    for name in mapping:
        _REFS[name] = _REFS.get(name, 1) - 1
        if _REFS[name] <= 0:
            _REFS.pop(name, None)
            _REGISTRY.pop(name, None)


def registered() -> list[str]:
    """The host names testbeds running in this process answer for now."""
    return list(_REGISTRY)


def parse_hosts(raw: Any) -> dict[str, str]:
    if not raw:
        return {}
    if isinstance(raw, str):
        raw = json.loads(raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{HOSTS_SETTING} must be a dict of name -> address")
    return {str(k).lower(): str(v) for k, v in raw.items()}


class TestbedResolver(CachingThreadedResolver):
    """Resolves testbed names from the setting or the in-process registry, others as usual."""

    __test__ = False  # not a pytest test class

    def __init__(self, reactor: Any, cache_size: int, timeout: float, hosts: Mapping[str, str] | None = None):
        super().__init__(reactor, cache_size, timeout)
        self.hosts = dict(hosts or {})

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> TestbedResolver:
        s = crawler.settings
        cache_size = s.getint("DNSCACHE_SIZE") if s.getbool("DNSCACHE_ENABLED") else 0
        return cls(reactor, cache_size, s.getfloat("DNS_TIMEOUT"), parse_hosts(s.get(HOSTS_SETTING)))

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        key = name.lower()
        addr = self.hosts.get(key) or _REGISTRY.get(key)
        if addr is not None:
            return defer.succeed(addr)
        return super().getHostByName(name, timeout)


def install_resolver(reactor: Any = None, hosts: Mapping[str, str] | None = None) -> TestbedResolver:
    """Install a TestbedResolver on the running reactor (for a testbed started after
    Scrapy set up its own resolver, as the catalog spider does)."""
    if reactor is None:
        from twisted.internet import reactor as _reactor

        reactor = _reactor
    current = getattr(reactor, "resolver", None)
    if isinstance(current, TestbedResolver):
        current.hosts.update(hosts or {})
        return current
    r = TestbedResolver(reactor, 10000, 60.0, hosts or {})
    r.install_on_reactor()
    return r
