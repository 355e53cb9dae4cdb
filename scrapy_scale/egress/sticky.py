"""Stickiness: a domain's requests kept on one egress for a while (``SCALE_EGRESS_STICKY_USES``
requests at most, ``SCALE_EGRESS_STICKY_AGE`` seconds at most), as long as that egress is
among those the pool may pick and the request does not avoid it.

Plain Python, the time is passed in: :class:`Stickiness` owns each domain's sticky egress;
the pool (:class:`~scrapy_scale.egress.pool.EgressPool`) asks it before a weighted pick.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any


@dataclass
class Sticky:
    egress: str
    uses: int
    since: float


class Stickiness:
    def __init__(self, options: Any):
        #: the pool's options (``sticky_uses``, ``sticky_age``; no stickiness when 0 uses)
        self.options = options
        self.by_domain: dict[str, Sticky] = {}

    def kept(self, domain: str, pick: list[str], avoid: Container[str], now: float) -> str | None:
        """The domain's sticky egress when it may carry this request (one use more), else None."""
        o = self.options
        s = self.by_domain.get(domain)
        if (
            o.sticky_uses
            and s is not None
            and s.egress in pick
            and s.egress not in avoid
            and s.uses < o.sticky_uses
            and now - s.since < o.sticky_age
        ):
            s.uses += 1
            return s.egress
        return None

    def chose(self, domain: str, egress: str, now: float) -> None:
        """The pool picked ``egress`` for ``domain`` by weight: it sticks from now."""
        if self.options.sticky_uses:
            self.by_domain[domain] = Sticky(egress, 1, now)

    def forget(self, egresses: Container[str]) -> None:
        """The pool's egresses changed: a sticky egress that left it is forgotten."""
        for d, s in list(self.by_domain.items()):
            if s.egress not in egresses:
                del self.by_domain[d]
