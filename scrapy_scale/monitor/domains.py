"""Bounded label cardinality for per-domain metrics: the busiest N domains plus ``other``.

Plain Python (no Scrapy, no Prometheus), so the policy is testable on its own.

A counter's series must only grow, so a domain never moves between series: events of a
domain count under ``other`` until the domain is *named*, and under its own name from
then on (the sum over every series is always the total). :meth:`TopDomains.refresh`
(called by the metrics extension every ``SCALE_METRICS_INTERVAL``) names the busiest
unnamed domains while fewer than N are named; a named domain keeps its series for the
life of the crawl. A crawl of 50,000 domains therefore makes at most N + 1 series per
per-domain metric, and the named ones are those with the most traffic when slots were
free (the first interval of a broad crawl fills them).

Traffic of unnamed domains is kept in a bounded table (``cap`` entries; when it is full,
the smaller half is forgotten), so memory does not grow with the number of domains.
"""

from __future__ import annotations

from collections import Counter

OTHER = "other"


class TopDomains:
    def __init__(self, n: int, cap: int = 10_000):
        self.n = n
        self.cap = max(cap, 2 * n, 2)
        self.named: set[str] = set()
        self._traffic: Counter[str] = Counter()

    @property
    def counted(self) -> int:
        """Unnamed domains whose traffic is counted now (``cap`` at most)."""
        return len(self._traffic)

    def label(self, domain: str) -> str:
        """The label value for one event of ``domain`` (and count its traffic)."""
        if domain in self.named:
            return domain
        if self.n:
            self._traffic[domain] += 1
            if len(self._traffic) > self.cap:
                self._traffic = Counter(dict(self._traffic.most_common(self.cap // 2)))
        return OTHER

    def refresh(self) -> list[str]:
        """Name the busiest unnamed domains while slots are free; returns the newly named."""
        free = self.n - len(self.named)
        if free <= 0 or not self._traffic:
            return []
        new = [d for d, _ in self._traffic.most_common(free) if d != OTHER]
        for d in new:
            self.named.add(d)
            del self._traffic[d]
        return new
