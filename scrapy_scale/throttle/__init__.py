"""Per-site pacing: profiles, the adaptive delay, Retry-After pauses, one rate limit per site
across all workers. See docs/throttle.md."""

from scrapy_scale.throttle.throttle import Throttle

__all__ = ["Throttle"]
