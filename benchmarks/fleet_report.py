"""The figures, goals and sizing table of ``bench_fleet`` (from what its runs measured)."""

from __future__ import annotations

import argparse
import math
from typing import Any

#: issue 34's goals
CPU_US = 40.0  # Redis server CPU per URL crawled
ROUND_TRIPS = 4.0  # per URL, amortised
BALANCE = 0.20  # each shard within +-20% of a third
P99_MS = 20.0  # lease latency at 128 workers on one node
P99_AT = 128
#: memory projection: a fifth of the URLs pending (as docs/frontier.md's), 1.3x headroom
PENDING_SHARE = 0.2
HEADROOM = 1.3
TARGET = 10_000  # pages/s of the fleet to size


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def top_level_usec(node: dict[str, Any], client: dict[str, int]) -> dict[str, tuple[float, float]]:
    """Per command: (calls the clients sent, usec of them). A script's usec includes what it
    runs; a name the scripts also run is charged for the clients' share of its calls."""
    out: dict[str, tuple[float, float]] = {}
    for name, (calls, usec) in node["cmd"].items():
        base = name.split("|")[0]
        sent = client.get(base, 0)
        if base in ("evalsha", "eval"):
            out[name] = (calls, usec)
        elif sent:
            share = min(1.0, sent / calls)
            out[name] = (calls * share, usec * share)
    return out


def figures(run: dict[str, Any]) -> dict[str, Any]:
    """Per URL crawled, summed over the primaries."""
    n = max(1, run["crawled"])
    nodes = run["nodes"]
    client = run["client_commands"]
    tops = [top_level_usec(x, client) for x in nodes]
    usec = sum(u for t in tops for _, u in t.values())
    return {
        "urls_s": run["crawled"] / run["seconds"],
        "client_cmds": sum(client.values()) / n,
        "round_trips": run["round_trips"] / n,
        "server_cmds": sum(c for x in nodes for c, _ in x["cmd"].values()) / n,
        "in_B": sum(x["in"] for x in nodes) / n,
        "out_B": sum(x["out"] for x in nodes) / n,
        "cmd_us": usec / n,
        "cpu_us": 1e6 * sum(x["cpu"] for x in nodes) / n,
        "mem_B": sum(x["job_B"] for x in nodes) / n,
        "p50": pct(run["lease_ms"], 0.50),
        "p99": pct(run["lease_ms"], 0.99),
        "tops": tops,
    }


def by_command(run: dict[str, Any], f: dict[str, Any]) -> list[str]:
    n = max(1, run["crawled"])
    merged: dict[str, list[float]] = {}
    for t in f["tops"]:
        for k, (c, u) in t.items():
            m = merged.setdefault(k, [0.0, 0.0])
            m[0] += c
            m[1] += u
    inner: dict[str, float] = {}
    for x in run["nodes"]:
        for k, (c, _) in x["cmd"].items():
            inner[k] = inner.get(k, 0) + c - merged.get(k, [0.0])[0]
    rows = ["| command (sent by the clients) | calls / URL | usec / call | usec / URL |", "|---|---:|---:|---:|"]
    for k, (c, u) in sorted(merged.items(), key=lambda kv: -kv[1][1]):
        name = k.replace("|", "\\|")  # a subcommand (script|load) in a Markdown table
        rows.append(f"| {name} | {c / n:.3f} | {u / c if c else 0:.1f} | {u / n:.2f} |")
    ran = ", ".join(f"{k} {c / n:.2f}" for k, c in sorted(inner.items(), key=lambda kv: -kv[1]) if c / n >= 0.05)
    return rows + ["", f"Commands run inside the scripts, per URL: {ran}."]


def script_table(b: dict[str, Any], args: argparse.Namespace) -> list[str]:
    n = max(1, b["crawled"])
    rows = [
        f"Server time by script (the slow log of a {args.sweep_seconds:g} s run of {args.workers} workers on the node, "
        f"every command logged; {b['crawled']:,} URLs; a script's time includes the commands it runs; the few "
        "commands sent outside scripts are in the commandstats table above):",
        "",
        "| script | calls / URL | usec / call, median | usec / URL, all calls | usec / URL, median x calls |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, d in sorted(b["scripts"].items(), key=lambda kv: -sum(kv[1])):
        rows.append(
            f"| {name} | {len(d) / n:.3f} | {pct(d, 0.5):.0f} | {sum(d) / n:.1f} | {pct(d, 0.5) * len(d) / n:.1f} |"
        )
    total = sum(sum(d) for d in b["scripts"].values()) / n
    med = sum(pct(d, 0.5) * len(d) for d in b["scripts"].values()) / n
    return rows + [
        f"| all scripts | | | {total:.1f} | {med:.1f} |",
        "",
        "Durations are wall time inside the server: a server that the machine's other processes preempt "
        "mid-command shows longer ones (the median is less affected than the sum).",
    ]


def balance(run: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], bool]:
    nodes = run["nodes"]
    third = len(nodes)
    cols = {
        "keys": [x["keys"] for x in nodes],
        "memory": [x["job_B"] for x in nodes],
        "commands": [sum(c for c, _ in t.values()) for t in f["tops"]],
        "server CPU": [x["cpu"] for x in nodes],
    }
    head = " | ".join(f"{k} (% of a third)" for k in cols)
    rows = [f"| primary | partitions | {head} |", "|---|---:|" + "---:|" * len(cols)]
    ok = True
    for i in range(len(nodes)):
        cells = []
        for k, vals in cols.items():
            total = sum(vals)
            share = vals[i] * third / total if total else 0.0
            if k != "server CPU" and abs(share - 1) > BALANCE:
                ok = False
            cells.append(f"{vals[i]:,.0f} ({100 * share:.0f}%)" if k != "server CPU" else f"{100 * share:.0f}%")
        tags = nodes[i].get("partitions", [])
        held = f"{len(tags)}{' (0: the run keys)' if run['job'] in tags else ''}"
        rows.append(f"| {i + 1} | {held} | " + " | ".join(cells) + " |")
    return rows, ok


def verdict(ok: bool) -> str:
    return "held" if ok else "MISSED"


def report(
    head: str,
    side: dict[str, dict[str, Any]],
    sweep: dict[int, dict[str, Any]],
    pending_b: dict[Any, float],
    scripts: dict[str, Any],
    args: argparse.Namespace,
) -> str:
    figs = {k: figures(v) for k, v in side.items()}
    swept = {n: figures(v) for n, v in sweep.items()}
    one = figs["one node"]
    some = next(iter(side.values()))
    s = "the store's default" if args.partitions is None else str(args.partitions)
    out = [
        head,
        "",
        f"Job: {args.sites:,} sites x {some['pages_per_site']} pages ({args.sites * some['pages_per_site']:,} URLs), "
        f"each page 5 links of its site; {args.workers} simulated workers in {some['processes']} processes, "
        f"{args.rate:g} pages/s each, batch {args.batch}, rounds every 0.25 s; partitions S (column S) = {s}; "
        f"AOF {args.aof}; Redis servers at nice {args.server_nice}. Per URL crawled (the primaries summed):",
        "",
        "| Redis | S | URLs | URLs/s | commands sent | commands run (incl. in scripts) | round trips | bytes in "
        "| bytes out | server CPU, commandstats (us) | server CPU, INFO cpu (us) | memory, done (B) "
        "| lease p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, f in figs.items():
        out.append(
            f"| {k} | {side[k]['partitions']} | {side[k]['crawled']:,} | {f['urls_s']:,.0f} | {f['client_cmds']:.2f} | {f['server_cmds']:.2f} "
            f"| {f['round_trips']:.2f} | {f['in_B']:,.0f} | {f['out_B']:,.0f} | {f['cmd_us']:.1f} | {f['cpu_us']:.1f} "
            f"| {f['mem_B']:.0f} | {f['p50']:.1f} / {f['p99']:.1f} |"
        )
    out += ["", "Where the node's commandstats time goes:", ""] + by_command(side["one node"], one)
    out += ["", *script_table(scripts, args)]
    cl_name = next((k for k in side if k != "one node"), None)
    bal_ok = False
    if cl_name:
        rows, bal_ok = balance(side[cl_name], figs[cl_name])
        out += ["", f"Balance over the Cluster's primaries ({cl_name}), the job's share of each:", ""] + rows
    out += [
        "",
        f"Lease latency on the node, {args.sweep_seconds:g} s each, a job of {args.sites:,} sites x "
        f"{max(some['pages_per_site'], 100)} pages, {args.sweep_load:g} pages/s offered by all the workers together:",
        "",
        "| workers | pages/s each | URLs/s crawled | leases | lease p50 ms | lease p99 ms | round p99 ms "
        "| server CPU us/URL (commandstats / INFO cpu) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, f in swept.items():
        out.append(
            f"| {n} | {sweep[n]['rate']:g} | {f['urls_s']:,.0f} | {len(sweep[n]['lease_ms']):,} | {f['p50']:.1f} "
            f"| {f['p99']:.1f} | {pct(sweep[n]['round_ms'], 0.99):.1f} | {f['cmd_us']:.1f} / {f['cpu_us']:.1f} |"
        )
    p99 = swept[P99_AT]["p99"] if P99_AT in swept else float("nan")
    rt = max(f["round_trips"] for f in figs.values())
    out += [
        "",
        "| goal | measured | bound | |",
        "|---|---:|---:|---|",
        f"| Redis server CPU per URL (commandstats, one node) | {one['cmd_us']:.1f} us | <= {CPU_US:g} us "
        f"| {verdict(one['cmd_us'] <= CPU_US)} |",
        f"| Redis server CPU per URL (INFO cpu, one node) | {one['cpu_us']:.1f} us | <= {CPU_US:g} us "
        f"| {verdict(one['cpu_us'] <= CPU_US)} |",
        f"| round trips per URL, amortised (worst of the two) | {rt:.2f} | <= {ROUND_TRIPS:g} "
        f"| {verdict(rt <= ROUND_TRIPS)} |",
        f"| each primary's keys, memory, commands within +-20% of a third | see above | +-20% | {verdict(bal_ok)} |",
        f"| lease p99 at {P99_AT} workers, one node | {p99:.1f} ms | <= {P99_MS:g} ms "
        f"| {verdict(p99 <= P99_MS) if P99_AT in swept else f'not run (--sweep without {P99_AT})'} |",
    ]
    out += ["", *sizing(one, pending_b, args)]
    return "\n".join(out)


def sizing(one: dict[str, Any], pending: dict[Any, float], args: argparse.Namespace) -> list[str]:
    done_b = one["mem_B"]
    pending_b, packed_b = pending[None], pending[256]
    per_url_b = (1 - PENDING_SHARE) * done_b + PENDING_SHARE * pending_b
    rows = ["| | from commandstats | from INFO cpu |", "|---|---:|---:|"]
    rates = {k: 0.7e6 / one[k] for k in ("cmd_us", "cpu_us")}
    rows.append("| URLs/s one shard sustains at 70% CPU | " + " | ".join(f"{v:,.0f}" for v in rates.values()) + " |")
    rows.append(
        f"| shards for {TARGET:,} pages/s | " + " | ".join(f"{math.ceil(TARGET / v)}" for v in rates.values()) + " |"
    )
    rows.append(
        f"| workers (at {args.worker_pages:g} pages/s each) one shard serves before it is the bottleneck | "
        + " | ".join(f"{v / args.worker_pages:,.0f}" for v in rates.values())
        + " |"
    )
    packed_url_b = (1 - PENDING_SHARE) * done_b + PENDING_SHARE * packed_b
    mem = [
        "",
        f"Memory (`MEMORY USAGE` of the job's keys): {done_b:.0f} B per done URL (this run), {pending_b:.0f} B per "
        f"pending link (20,000 seeded alone; {packed_b:.0f} B with `hash-max-listpack-value 256`, which keeps a "
        f"record whose request is over 64 bytes a listpack); a crawl with a fifth pending, x{HEADROOM:g} for "
        "fragmentation and snapshots:",
        "",
        "| URLs | memory | shards of 16 GB | with hash-max-listpack-value 256 | shards of 16 GB |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n in (10**8, 10**9):
        gb = n * per_url_b * HEADROOM / 1e9
        gb2 = n * packed_url_b * HEADROOM / 1e9
        mem.append(
            f"| 10^{int(math.log10(n))} | {gb:,.1f} GB | {math.ceil(gb / 16)} | {gb2:,.1f} GB | {math.ceil(gb2 / 16)} |"
        )
    return ["Sizing (one shard = one primary):", "", *rows, *mem]
