"""The frontier's backends and :func:`open_store`, which picks one by URL.

The store interface (:mod:`scrapy_scale.frontier.store`) knows no backend; each backend
lives in its own package here: :mod:`.sqlite` (one file for every job) and :mod:`.redis`
(many workers; its Lua scripts ship as package data), each one store class over units it
owns. :func:`sqlite_path` says where a ``sqlite://`` URL puts its file. What the backends
share: the order they hand records out in (:mod:`.ordering`) and their own state read back,
checked (:mod:`.read_back`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends.sqlite import SqliteStore
from scrapy_scale.frontier.store import FrontierError, FrontierStore

__all__ = ["open_store", "sqlite_path"]


def sqlite_path(url: str, state_dir: str = ".scale") -> str | None:
    """The file a ``sqlite://`` frontier URL names (None: another scheme)."""
    if urlsplit(url).scheme != "sqlite":
        return None
    return SqliteStore.path_from_url(url, state_dir)


def open_store(
    url: str,
    job: str,
    *,
    state_dir: str = ".scale",
    clock: clock_mod.Clock = clock_mod.wall,
    connect: bool = True,
    partitions: int | None = None,
) -> FrontierStore:
    """The store for ``url`` and ``job``, opened (``connect=False``: not yet).

    - ``sqlite:///abs/path.db`` (also ``sqlite:////abs/path.db``) is absolute,
      ``sqlite://rel/path.db`` relative to the current directory (the item
      store reads its URL the same way); ``sqlite://`` alone =
      ``{state_dir}/frontier.db``. One file holds every job.
    - ``redis://host:port/db`` (``rediss://`` for TLS): keys ``scale:{job}:...``, split
      into ``partitions`` by site, each its own hash tag (Cluster slot); None: the job's
      stored count, else 1 on a single node and 4 per primary on a Cluster.

    Raises :class:`FrontierError` for an unknown scheme, an unreachable server or
    an incompatible file.
    """
    scheme = urlsplit(url).scheme
    store: FrontierStore
    if scheme == "sqlite":
        store = SqliteStore(SqliteStore.path_from_url(url, state_dir), job, clock=clock)
    elif scheme in ("redis", "rediss"):
        from scrapy_scale.frontier.backends.redis import RedisStore  # redis is an optional extra

        store = RedisStore(url, job, clock=clock, partitions=partitions)
    else:
        raise FrontierError(
            f"SCALE_FRONTIER_URL: unknown URL scheme {scheme!r} in {url!r}; "
            "use sqlite:///path/to/frontier.db (one machine) or redis://host:6379/0 (many workers)"
        )
    if connect:
        store.open()
    return store
