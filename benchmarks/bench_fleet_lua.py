"""Benchmark (not a test): what the pieces of a lease cost the Redis server, in Lua.

    python -m benchmarks.bench_fleet_lua --nice -10     # a few seconds

A private Redis node (no AOF: nothing here is about the disk), one job seeded through the
store (``--sites`` sites x 2 pages). Each piece below runs ``--n`` times in a loop inside one
script call, after the shared functions every frontier script starts with (the slot guard,
``queue_entry.lua``, ``prelude.lua``); the call is timed by ``INFO commandstats`` (the
best of 5 rounds of 100 calls), and the table gives each piece's server time per record
over the empty script's. A piece is a fragment of ``lua/lease.lua`` on a real record and
ready-queue entry of the job (the same calls with the same arguments), so the sum is
about what ``lease.lua`` spends per record leased before its share of the calls made once
per lease. The fragments are copied here: after a change to ``lease.lua``, change them too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_fleet import Node, git_head  # noqa: E402
from benchmarks.fleet_worker import new_request, open_fleet_store  # noqa: E402
from scrapy_scale.frontier.backends.redis import lua  # noqa: E402

#: name -> (Lua before the loop, the loop's body); Q is a ready queue's key, REC a record's
PIECES: dict[str, tuple[str, str]] = {
    "queue entry read (LINDEX, as the lease's LPOP)": ("", "local e = redis.call('LINDEX', Q, 0)"),
    "fingerprint from the entry's 20 bytes (qunpack)": ("local e = redis.call('LINDEX', Q, 0)", "local x = qunpack(e)"),
    "record read (HMGET of 10 fields)": (
        "",
        "local r = redis.call('HMGET', REC, 'st', 'p', 'dom', 'd', 'a', 'el', 'enq', 't', 'fc', 'fr')",
    ),
    "readability check (unreadable)": (
        "local r = redis.call('HMGET', REC, 'st', 'p', 'dom', 'd', 'a', 'el', 'enq', 't', 'fc', 'fr')",
        "local w = unreadable({r[4], r[5], r[6], r[7], r[8]})",
    ),
    "record write (HSET of 4 fields)": (
        "",
        "redis.call('HSET', REC, 't', string.format('%d', i), 'st', 0, 'o', 'w1', 'le', 12345.5)",
    ),
    "counters (move)": ("", "move(0, 0)"),
    "a queue key built (concatenation)": ("", "local q = P..':q:'..'0'..':'..'site123.example.test'"),
    "reply row built and returned (11 fields)": (
        "local out = {}",
        "out[#out + 1] = {'a'..i, string.rep('b', 80), 'c', 'd', 'e', 'f', 'g', i, '', '', ''}",
    ),
}


def timed(node: Node, sha: str, key: str, calls: int = 100, rounds: int = 5) -> float:
    """Best mean usec of a call of ``sha`` over ``rounds`` rounds of ``calls`` calls."""
    best = float("inf")
    for _ in range(rounds):
        node.r.config_resetstat()
        for _ in range(calls):
            node.r.evalsha(sha, 1, key)
        s = node.r.info("commandstats")["cmdstat_evalsha"]
        best = min(best, s["usec"] / s["calls"])
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sites", type=int, default=1000)
    p.add_argument("--n", type=int, default=32, help="records per call (a lease's size; default 32)")
    p.add_argument("--nice", type=int, default=0, help="nice value of the Redis server (below 0 needs the right)")
    args = p.parse_args(argv)
    from tests.support import services

    server = services.private_redis(Path(tempfile.mkdtemp(prefix="bench-fleet-lua-")), appendonly=False)
    t, load0 = time.monotonic(), os.getloadavg()[0]
    try:
        if args.nice and server.proc is not None:
            os.setpriority(os.PRIO_PROCESS, server.proc.pid, args.nice)
        node = Node(server.port)
        job = f"fleet-lua-{uuid.uuid4().hex[:8]}"
        store = open_fleet_store(f"redis://127.0.0.1:{server.port}/0", job, None)
        store.begin_run()
        store.enqueue_new([new_request(s, pg) for pg in range(2) for s in range(args.sites)])
        key = f"scale:{{{job}}}"
        queue = next(k.decode() for k in node.r.scan_iter(match=f"*{job}*:q:0:*", count=1000))
        record = next(k.decode() for k in node.r.scan_iter(match=f"*{job}*:r:*", count=1000))
        shared = "".join(lua.source(part) for part in ("guard", *lua.WRITE))
        head = f"local N, Q, REC = {args.n}, '{queue}', '{record}'\n"

        def cost(before: str, body: str) -> float:
            text = shared + head + before + f"\nfor i = 1, N do {body} end\n"
            text += "return out" if "out" in before else "return 1"
            return timed(node, node.r.script_load(text), key)

        empty = cost("", "")
        rows = [(name, (cost(*piece) - empty) / args.n) for name, piece in PIECES.items()]
        store.close()
    finally:
        server.kill()
    print(
        f"`python -m benchmarks.bench_fleet_lua {' '.join(sys.argv[1:] if argv is None else argv)}` at {git_head()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.monotonic() - t:.0f} s, load average "
        f"{load0:.1f} -> {os.getloadavg()[0]:.1f}; a script call with the shared functions and nothing else: "
        f"{empty:.1f} us\n"
    )
    print("| piece of a lease, per record | server usec |")
    print("|---|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")
    print(f"| the pieces together | {sum(us for _, us in rows):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
