"""Benchmark (not a test): the Redis server's time per URL crawled when the server is busy.

    python -m benchmarks.bench_fleet_replay --nice -10    # 1,000 sites x 20 pages, 3 pairs, about 1 minute

``bench_fleet_scripts``'s crawl (one client, round after round) is run live against a
private Redis node, and every byte the client sends is recorded. The recording is then
replayed, byte for byte, into a second fresh node of the same configuration (AOF
``everysec``) with ``redis-cli --pipe``, which sends it as fast as the server takes it.

The two figures side by side, per URL crawled (from ``INFO`` before and after each):

- **live**: the server waits for the client between calls. On a machine whose cores the
  client shares with the server (this one: 2 cores), the client's work between calls
  leaves the server's caches cold for the next call, which then takes longer;
- **replay**: the same calls in the same order, with the same arguments (the client's
  clock and fingerprints are in them), so the same records and the same answers; the
  server never waits, as a shard at its capacity does not. Its ``INFO commandstats`` time is
  what the scripts cost a server kept busy, the figure a shard's capacity is sized by.
  ``INFO cpu`` of a replay also has the reading of a pipelined stream, cheaper than a
  crawl's (about one round trip every two URLs).

The replay is checked: the job on the second node must end with every URL done, as on the
first, and with the same counts; its replies are not compared one by one (a reply can
differ only if the server's state does, which the counts would show).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_fleet import Node, delta, git_head  # noqa: E402
from benchmarks.bench_fleet_scripts import add_job_args, crawl_job  # noqa: E402
from benchmarks.fleet_report import top_level_usec  # noqa: E402
from benchmarks.fleet_worker import Meter, open_fleet_store  # noqa: E402


@contextmanager
def recording(out: list[bytes | str]) -> Iterator[None]:
    """Within: every packed command a redis-py connection sends is appended to ``out``."""
    from redis import connection

    owner = next(c for c in connection.Connection.__mro__ if "send_packed_command" in c.__dict__)
    send_packed = owner.send_packed_command  # type: ignore[attr-defined]

    def recorded(conn: Any, command: Any, check_health: bool = True) -> Any:
        out.extend([command] if isinstance(command, bytes | str) else list(command))
        return send_packed(conn, command, check_health)

    owner.send_packed_command = recorded  # type: ignore[attr-defined]
    try:
        yield
    finally:
        owner.send_packed_command = send_packed  # type: ignore[attr-defined]


def fresh_node(workdir: Path, nice: int) -> Any:
    from tests.support import services

    server = services.private_redis(workdir, appendonly=False)
    if nice and server.proc is not None:
        os.setpriority(os.PRIO_PROCESS, server.proc.pid, nice)
    Node(server.port).set_aof("everysec")
    return server


def per_url(d: dict[str, Any], n: int, client: dict[str, int]) -> dict[str, float]:
    """Per URL: the commands the server ran (the scripts' own included), the usec of the
    commands the client sent (a script's includes what it runs), and ``INFO cpu``."""
    return {
        "commandstats_us": sum(u for _, u in top_level_usec(d, client).values()) / n,
        "cpu_us": 1e6 * d["cpu"] / n,
        "commands": sum(c for c, _ in d["cmd"].values()) / n,
    }


def one_pair(args: argparse.Namespace, workdir: Path, meter: Meter) -> dict[str, Any]:
    """A live crawl recorded, and its replay: figures per URL of each."""
    job = f"fleet-{uuid.uuid4().hex[:8]}"
    sent: list[bytes | str] = []
    meter.commands.clear()
    live = fresh_node(workdir / f"live-{job}", args.nice)
    try:
        node = Node(live.port)
        before = node.snapshot()
        meter.on = True
        with recording(sent):
            n, _ = crawl_job(f"redis://127.0.0.1:{live.port}/0", None, job, args)
        meter.on = False
        live_d = delta(before, node.snapshot())
        live_counts = open_fleet_store(f"redis://127.0.0.1:{live.port}/0", job, None).counts()
    finally:
        live.kill()
    stream = workdir / f"{job}.resp"
    stream.write_bytes(b"".join(x if isinstance(x, bytes) else x.encode() for x in sent))
    again = fresh_node(workdir / f"replay-{job}", args.nice)
    try:
        node = Node(again.port)
        before = node.snapshot()
        with stream.open("rb") as f:
            p = subprocess.run(
                ["redis-cli", "-p", str(again.port), "--pipe", "--pipe-timeout", "0"],
                stdin=f,
                capture_output=True,
                text=True,
                check=False,
            )
        replay_d = delta(before, node.snapshot())
        replay_counts = open_fleet_store(f"redis://127.0.0.1:{again.port}/0", job, None).counts()
    finally:
        again.kill()
        stream.unlink()
    keys = ("pending", "delayed", "leased", "done", "failed")
    # redis-cli exits 1 for the error replies the live client got too: CLIENT SETINFO of a
    # newer client (Redis 7.0 has none) and NOSCRIPT before each script's first load
    if any(replay_counts.get(k) != live_counts.get(k) for k in keys) or "Last reply received" not in p.stdout:
        raise SystemExit(
            f"the replay did not give the live crawl's job: {live_counts} live, {replay_counts} replayed; "
            f"redis-cli said {p.stdout.strip()[-300:]} {p.stderr.strip()[-300:]}"
        )
    client = dict(meter.commands)
    return {
        "urls": n,
        "live": per_url(live_d, n, client),
        "replay": per_url(replay_d, n, client),
        "done": replay_counts["done"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_job_args(p)  # --nice: of both servers
    p.add_argument("--pairs", type=int, default=3, help="live crawl and replay pairs, in turn (default 3)")
    args = p.parse_args(argv)
    load0, t = os.getloadavg()[0], time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-fleet-replay-"))
    meter = Meter()
    meter.install()
    pairs = [one_pair(args, workdir, meter) for _ in range(args.pairs)]
    cmd = "python -m benchmarks.bench_fleet_replay " + " ".join(sys.argv[1:] if argv is None else argv)
    print(
        f"`{cmd.strip()}` at {git_head()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{time.monotonic() - t:.0f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; "
        f"{pairs[0]['urls']:,} URLs crawled a run, every one done in each replay\n"
    )
    print("| per URL crawled | live | replay (the server kept busy) | replay / live |")
    print("|---|---:|---:|---:|")
    for key, name in (
        ("commands", "commands run (incl. in scripts)"),
        ("commandstats_us", "server time of the commands sent, `INFO commandstats` (us)"),
        ("cpu_us", "server CPU, `INFO cpu` (us)"),
    ):
        lv = [x["live"][key] for x in pairs]
        rp = [x["replay"][key] for x in pairs]
        ratio = [r / v for r, v in zip(rp, lv, strict=True) if v]
        print(
            f"| {name} | {', '.join(f'{x:.1f}' for x in lv)} | {', '.join(f'{x:.1f}' for x in rp)} | "
            f"{', '.join(f'{x:.2f}' for x in ratio)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
