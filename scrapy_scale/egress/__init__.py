"""The egress pool: proxies (and ``direct``) as replaceable resources with health per
egress and per (egress, domain), eviction and re-probe, selection and route caps.

See docs/egress.md. Policy lives in plain modules (:mod:`.identity`, :mod:`.health`,
:mod:`.pool`, :mod:`.routes`); the Scrapy glue in :mod:`.middleware`.
"""

from scrapy_scale.egress.middleware import EgressMiddleware

__all__ = ["EgressMiddleware"]
