"""The one way every component opens Redis from a URL: the frontier, the shared pacing
limiter and learned delays, the shared egress health, the worker snapshots of
``scrapy scale watch``/``status`` (and through the frontier, the seeds feed and the route
state kept with the pacing).

``redis://host:port/db`` (``rediss://`` for TLS) names one node. :func:`open_redis` asks
that node ``INFO cluster``: a node that answers ``cluster_enabled:1`` is one node of a
Redis Cluster, and the client returned is a ``redis.cluster.RedisCluster`` that found the
other nodes from it (and follows ``MOVED``/``ASK``); any other node gets a plain
``redis.Redis``. A component never keeps a single-node client of its own, which a Cluster
would answer with ``MOVED`` for the keys on the other nodes.

Every key of a job starts ``scale:{JOB}:``: the hash tag ``{JOB}`` puts all of them in one
slot, so the Lua scripts (each reads and writes keys of one job only, named from its
``KEYS[1]``) and the multi-key commands never span slots (``CROSSSLOT``). One job lives on
one shard; jobs are spread over the shards.

What the node answers is untrusted: an ``INFO`` that fails (a proxy or an ACL that does
not allow it) or says something else than a cluster state is taken as a single node, with
one warning line. A node that cannot be reached raises :class:`RedisOpenError` (a
``redis.ConnectionError``) whose message is one line with the URL redacted.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from scrapy_scale.errors import ScaleError
from scrapy_scale.redact import redact_url

logger = logging.getLogger(__name__)


class RedisOpenError(ScaleError, redis.ConnectionError):
    """The node of the URL could not be reached or opened (one line, URL redacted);
    ``reason`` is the why alone."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"cannot open Redis at {where} ({reason})")
        self.reason = reason


def cluster_enabled(info: Any, where: str) -> bool:
    """Does the node's ``INFO cluster`` answer say it is a Cluster node? Anything but a
    mapping with ``cluster_enabled`` 0 or 1 is a single node, with one warning."""
    value = info.get("cluster_enabled") if isinstance(info, dict) else None
    if str(value) in ("0", "1"):
        return str(value) == "1"
    logger.warning(
        "Redis at %s: INFO cluster answered %.80r, not a cluster state; taking it as a single node", where, info
    )
    return False


def is_cluster(client: Any) -> bool:
    """Is ``client`` (from :func:`open_redis`) a Cluster client?"""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def open_redis(url: str, **options: Any) -> Any:
    """A client for the Redis at ``url``: a ``RedisCluster`` when the node is a Cluster node,
    else a ``redis.Redis``. ``options`` are redis-py's (``socket_timeout``,
    ``decode_responses``...). The node is asked once, here."""
    where = redact_url(url)
    node: Any = None
    try:
        node = redis.Redis.from_url(url, **options)
        try:
            info = node.info("cluster")
        except redis.ResponseError as e:  # INFO refused (an ACL, a proxy): no Cluster to find
            logger.warning("Redis at %s: INFO cluster refused (%s); taking it as a single node", where, _line(e))
            node.ping()
            return node
        if not cluster_enabled(info, where):
            return node
        node.close()
        node = None
        from redis.cluster import RedisCluster

        db = redis.connection.parse_url(url).get("db") or 0
        if int(db) != 0:
            raise RedisOpenError(where, f"a Cluster node: a Cluster has database 0 only, not {db}")
        opts = {k: v for k, v in options.items() if k not in ("health_check_interval",)}
        cluster = RedisCluster.from_url(url, **opts)
        cluster.ping()
        return cluster
    except RedisOpenError:
        raise
    except (redis.RedisError, ValueError, OSError) as e:
        if node is not None:
            node.close()
        raise RedisOpenError(where, f"{type(e).__name__}: {_line(e)}") from None


def _line(e: BaseException) -> str:
    """An error's message on one line (a node's answer may hold newlines)."""
    return " ".join(str(e).split())[:300]
