"""The Redis frontier backend: :class:`.store.RedisStore` over the units it owns
(:mod:`.connection`, :mod:`.runs`, :mod:`.records`, :mod:`.reads`), its Lua scripts
(``lua/*.lua``, package data read by :mod:`.lua`) and its cheap status reads (:mod:`.status`)."""

from __future__ import annotations

from scrapy_scale.frontier.backends.redis.store import RedisStore, glob_escape

__all__ = ["RedisStore", "glob_escape"]
