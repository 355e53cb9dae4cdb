"""Real services on loopback for the tests: each starts, waits until it answers, stops.

Nothing here is a mock. A service that cannot be started fails the test with a
message saying how to get it; tests are never skipped silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import system_tools
from tests.support.hang import hang_guard

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + hang_guard(timeout)
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - any failure means "not yet"
            last = e
        time.sleep(0.05)
    pytest.fail(f"{what} did not answer within {timeout:.0f}s (last error: {last!r})")


def port_open(port: int, host: str = LOOPBACK) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Process:
    """A server process we own: start, kill -9, restart on the same port and data."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: Path, ready: Callable[[], bool]):
        self.name = name
        self.argv = argv
        self.port = port
        self.workdir = workdir
        self.ready = ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"{name}.log"

    def start(self, timeout: float = 30) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(self._alive_and_ready, timeout, f"{self.name} on port {self.port}")

    def _alive_and_ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        return self.ready()

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(hang_guard(10))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(hang_guard(10))
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.kill()
        self.start()


# ---- Redis -------------------------------------------------------------------------


def redis_ping(url: str) -> bool:
    import redis

    return bool(redis.Redis.from_url(url, socket_timeout=1).ping())


def redis_argv(port: int, workdir: Path, appendonly: bool = True) -> list[str]:
    """The command line of a redis-server on ``port`` of loopback, its data in ``workdir``
    (AOF written at every command when ``appendonly``, no RDB snapshots)."""
    exe = system_tools.need("redis-server")
    return [
        exe,
        "--port",
        str(port),
        "--bind",
        LOOPBACK,
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--appendfsync",
        "always",
    ]


def private_redis(workdir: Path, appendonly: bool = True, password: str | None = None) -> Process:
    """A Redis server of the test's own, on a free port, data in ``workdir``
    (``password``: clients must give it, e.g. ``redis://:PASSWORD@host:port/0``)."""
    port = free_port()
    argv = redis_argv(port, workdir, appendonly)
    auth = ""
    if password is not None:
        argv += ["--requirepass", password]
        auth = f":{password}@"
    p = Process("redis", argv, port, workdir, lambda: redis_ping(f"redis://{auth}{LOOPBACK}:{port}/0"))
    p.start()
    return p


# ---- MongoDB wire server -----------------------------------------------------------


def mongo_ping(uri: str) -> bool:
    import pymongo

    c: pymongo.MongoClient = pymongo.MongoClient(uri, serverSelectionTimeoutMS=1000)
    try:
        c.admin.command("ping")
        return True
    finally:
        c.close()


def private_mongo(workdir: Path) -> Process:
    """A MongoDB wire server of the test's own: a real mongod when one is on PATH
    and MONGO_URI is unset, else SecantusDB (`python -m secantus`)."""
    port = free_port()
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    mongod = shutil.which("mongod")
    if mongod and os.environ.get("SCALE_TEST_USE_MONGOD"):
        argv = [mongod, "--port", str(port), "--bind_ip", LOOPBACK, "--dbpath", str(data)]
    else:
        try:
            import secantus  # noqa: F401
        except ImportError:
            pytest.fail("SecantusDB is not installed; `pip install -e .[test]` brings it")
        argv = [sys.executable, "-m", "secantus", "--host", LOOPBACK, "--port", str(port), "--storage-path", str(data)]
    uri = f"mongodb://{LOOPBACK}:{port}/"
    p = Process("mongo", argv, port, workdir, lambda: mongo_ping(uri))
    p.start(timeout=60)
    return p


def private_mongo_with_users(workdir: Path, users: dict[str, tuple[str, list[dict[str, str]]]]) -> Process:
    """A SecantusDB server that requires authentication (``--auth``, SCRAM-SHA-256), with
    ``users`` (name -> (password, roles)) created in ``admin`` first, without auth, as
    SecantusDB's docs say (a real mongod when SCALE_TEST_USE_MONGOD is set works too)."""
    import pymongo

    p = private_mongo(workdir)
    c: pymongo.MongoClient = pymongo.MongoClient(f"mongodb://{LOOPBACK}:{p.port}/")
    try:
        for name, (password, roles) in users.items():
            c.admin.command("createUser", name, pwd=password, roles=roles)
    finally:
        c.close()
    p.stop()
    p.argv = p.argv + ["--auth"]
    p.start(timeout=60)
    return p


# ---- Redis Cluster -----------------------------------------------------------------


def cluster_state_ok(port: int, nodes: int) -> bool:
    """Does the node on ``port`` say ``cluster_state:ok`` and know ``nodes`` nodes?"""
    import redis

    r = redis.Redis(host=LOOPBACK, port=port, socket_timeout=1)
    try:
        info = r.cluster("info")
        return info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == nodes
    finally:
        r.close()


class RedisCluster:
    """A private Redis Cluster: ``primaries`` primaries with ``replicas`` replica each,
    every node a :class:`Process` (kill -9 and restart one alone) on a free port (its
    cluster bus on another), its data
    (AOF on) and cluster config file in its own folder under ``workdir``."""

    def __init__(
        self, workdir: Path, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 2000, appendonly: bool = True
    ):
        self.cli = system_tools.need("redis-cli")
        self.nodes: list[Process] = []
        taken: set[int] = set()

        def fresh_port() -> int:  # the nodes' and buses' ports, all chosen before any starts
            while (port := free_port()) in taken:
                pass
            taken.add(port)
            return port

        for i in range(primaries * (1 + replicas)):
            port = fresh_port()
            folder = workdir / f"node{i}"
            argv = redis_argv(port, folder, appendonly) + [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(folder / "nodes.conf"),
                "--cluster-node-timeout",
                str(node_timeout_ms),
                # the bus port is the port + 10000 unless given: a free port may be past 55535
                "--cluster-port",
                str(fresh_port()),
            ]
            self.nodes.append(
                Process(f"redis-{port}", argv, port, folder, lambda p=port: redis_ping(f"redis://{LOOPBACK}:{p}/0"))
            )
        self.replicas = replicas
        self.workdir = workdir

    def start(self, timeout: float = 60) -> None:
        for node in self.nodes:
            node.start()
        create = subprocess.run(
            [self.cli, "--cluster", "create", *(f"{LOOPBACK}:{n.port}" for n in self.nodes)]
            + ["--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=hang_guard(timeout),
            check=False,
        )
        if create.returncode != 0:
            pytest.fail(f"redis-cli --cluster create failed ({create.returncode}): {create.stdout[-2000:]}")
        for node in self.nodes:
            wait_until(
                lambda n=node: cluster_state_ok(n.port, len(self.nodes)), timeout, f"cluster_state:ok on {node.port}"
            )
            # a replica is in CLUSTER SLOTS (and can take over) once its first sync is done
            wait_until(lambda n=node: self.replication_up(n.port), timeout, f"the replication of {node.port}")

    def replication_up(self, port: int) -> bool:
        """A primary has all its replicas connected, a replica its link to its primary up."""
        import redis

        r = redis.Redis(host=LOOPBACK, port=port, socket_timeout=1)
        try:
            info = r.info("replication")
        finally:
            r.close()
        if info.get("role") == "master":
            return int(info.get("connected_slaves", 0)) >= self.replicas
        return info.get("master_link_status") == "up"

    @property
    def url(self) -> str:
        """The URL of one node (the first): a client finds the others from it."""
        return f"redis://{LOOPBACK}:{self.nodes[0].port}/0"

    def primaries(self) -> list[int]:
        """The ports of the nodes that are primaries now."""
        import redis

        ports = []
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            r = redis.Redis(host=LOOPBACK, port=node.port, socket_timeout=2)
            try:
                if r.info("replication").get("role") == "master":
                    ports.append(node.port)
            finally:
                r.close()
        return ports

    def node_keys(self, port: int, pattern: str) -> list[str]:
        """The keys matching ``pattern`` stored on the node at ``port`` (SCAN is per node)."""
        import redis

        r = redis.Redis(host=LOOPBACK, port=port, socket_timeout=5, decode_responses=True)
        try:
            return list(r.scan_iter(match=pattern, count=1000))
        finally:
            r.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()


def private_cluster(workdir: Path, primaries: int = 3, replicas: int = 1, appendonly: bool = True) -> RedisCluster:
    """A private Redis Cluster, started and ``cluster_state:ok`` on every node."""
    c = RedisCluster(workdir, primaries, replicas, appendonly=appendonly)
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    return c
