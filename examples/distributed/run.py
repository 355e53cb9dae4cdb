"""Three workers on one machine, as N workers on N machines would run, ending with a
reconciled report. From the repository root:

    python examples/distributed/run.py                 # starts everything it needs
    python examples/distributed/run.py --redis redis://127.0.0.1:6379/0 --mongo mongodb://127.0.0.1:27017/
    python examples/distributed/run.py --workers 4 --hosts 6 --pages 200 --json report.json

It starts (unless given a URL) a private Redis (the shared frontier) and a MongoDB wire
server (the shared item store: mongod when ``--mongod``, else SecantusDB), a testbed of
target hosts behind a pool of testbed proxies (the egresses), and Prometheus scraping every
worker through a file_sd folder. A feeder seeds the job (``scrapy scale seed``), then the
workers (``scrapy crawl catalog``, worker ids w0, w1, ...) share the frontier. Once the
job is drained and Prometheus has scraped the final numbers, the workers are stopped and
the report reconciles the frontier, the store and Prometheus: completed requests = done
records, stored rows = the testbed's products, no duplicate rows, each worker's share
(a job of at least 20 requests per worker: none below half its fair share). Exit status 0
only when everything reconciles. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scrapy_scale.frontier import open_store  # noqa: E402
from scrapy_scale.storage.backends import open_store as open_item_store  # noqa: E402
from scrapy_scale.testbed import Testbed  # noqa: E402
from scrapy_scale.testbed.faults import parse_proxy  # noqa: E402

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


#: set by Ctrl-C (SIGINT); the script stops at its next wait (see :func:`stop_if_interrupted`)
INTERRUPTED = threading.Event()


def _on_sigint(signum: int, frame: Any) -> None:
    # No KeyboardInterrupt from the handler: raised while a worker is being forked, inside
    # the logging module's at-fork hook, Python prints it as "Exception ignored" and drops
    # it, and the script went on to the end and exited 0. The flag is never lost.
    INTERRUPTED.set()


def stop_if_interrupted() -> None:
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


def poll(check: Any, timeout: float, interval: float = 0.2) -> tuple[Any, Any]:
    """Call ``check`` until it returns something true or ``timeout`` passes: (its last
    result, the last error it raised). Ctrl-C stops it (KeyboardInterrupt)."""
    deadline = time.monotonic() + timeout
    got: Any = None
    last: Any = None
    while time.monotonic() < deadline:
        stop_if_interrupted()
        try:
            got = check()
            if got:
                break
        except Exception as e:  # noqa: BLE001 - not ready yet
            last = e
        time.sleep(interval)
    return got, last


def wait(check: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    got, last = poll(check, timeout, interval)
    if not got:
        raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last!r})")
    return got


def _die_with_me() -> Any:
    """A Popen ``preexec_fn``: the child gets SIGKILL when this script dies, even by kill -9
    (Linux's PR_SET_PDEATHSIG; each child is in a session of its own, so a terminal's
    Ctrl-C does not reach it: the script stops it). None where there is no prctl."""
    me, kill = os.getpid(), int(signal.SIGKILL)
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    except (OSError, AttributeError):  # not Linux: the children outlive a kill -9
        return None

    def preexec() -> None:
        prctl(1, kill)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != me:  # the script died before the line above
            os._exit(1)

    return preexec


class Server:
    """A service process of ours, in its own process group, stopped at exit."""

    def __init__(self, name: str, argv: list[str], workdir: Path, ready: Any):
        workdir.mkdir(parents=True, exist_ok=True)
        self.name, self.ready = name, ready
        with open(workdir / f"{name}.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_me(),  # noqa: PLW1509 - only prctl and getppid, no locks
            )
        wait(lambda: self.proc.poll() is None and ready(), 60, f"{name} to answer")

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 15 s."""
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, None)):
            if self.proc.poll() is not None:
                return
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                continue


def need(exe: str, how: str) -> str:
    path = shutil.which(exe)
    if not path:
        raise SystemExit(f"{exe} is not installed: {how}")
    return path


def start_redis(workdir: Path) -> tuple[Server, str]:
    import redis

    exe = need("redis-server", "apt-get install redis-server, or give --redis URL")
    port = free_port()
    url = f"redis://{LOOPBACK}:{port}/0"
    argv = [exe, "--port", str(port), "--bind", LOOPBACK, "--dir", str(workdir), "--save", "", "--appendonly", "yes"]
    return Server("redis", argv, workdir, lambda: redis.Redis.from_url(url, socket_timeout=1).ping()), url


def start_mongo(workdir: Path, mongod: bool) -> tuple[Server, str]:
    import pymongo

    port = free_port()
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    if mongod:
        argv = [need("mongod", "install MongoDB"), "--port", str(port), "--bind_ip", LOOPBACK, "--dbpath", str(data)]
    else:
        try:
            import secantus  # noqa: F401
        except ImportError:
            raise SystemExit("SecantusDB is not installed (pip install -e .[test]); or give --mongo URI") from None
        argv = [sys.executable, "-m", "secantus", "--host", LOOPBACK, "--port", str(port), "--storage-path", str(data)]
    uri = f"mongodb://{LOOPBACK}:{port}/"

    def ping() -> bool:
        c: Any = pymongo.MongoClient(uri, serverSelectionTimeoutMS=1000)
        try:
            return bool(c.admin.command("ping"))
        finally:
            c.close()

    return Server("mongo", argv, workdir, ping), uri


def count_rows(store_url: str) -> int:
    store = open_item_store(store_url, "items")
    store.open()
    try:
        return store.count()
    finally:
        store.close()


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


class Prometheus(Server):
    def __init__(self, workdir: Path, sd: Path):
        exe = need("prometheus", "apt-get install prometheus, or run with --no-prometheus")
        port = free_port()
        self.url = f"http://{LOOPBACK}:{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: scrapy\n"
            "    honor_labels: true\n"
            f"    file_sd_configs: [{{files: ['{sd}/*.json'], refresh_interval: 1s}}]\n"
        )
        argv = [
            exe,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--log.level=warn",
        ]
        super().__init__("prometheus", argv, workdir, lambda: http_json(self.url + "/api/v1/status/buildinfo"))

    def targets_up(self) -> int:
        targets = http_json(self.url + "/api/v1/targets")["data"]["activeTargets"]
        return sum(1 for t in targets if t["health"] == "up")

    def by_worker(self, promql: str) -> dict[str, float]:
        body = http_json(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": f"sum by (worker) ({promql})"}))
        return {r["metric"].get("worker", ""): float(r["value"][1]) for r in body["data"]["result"]}


def scrapy(args: list[str], settings: dict[str, Any], log: Path | None = None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "scrapy", *args]
    for k, v in settings.items():
        argv += ["-s", f"{k}={json.dumps(v) if isinstance(v, dict | list) else v}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":"))
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed when the process ends
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_me(),  # noqa: PLW1509 - only prctl and getppid, no locks
    )


def run(opts: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    servers: list[Server] = []
    workers: list[subprocess.Popen[bytes]] = []
    job = opts.job or f"cluster-{uuid.uuid4().hex[:6]}"
    try:
        redis_url = opts.redis
        if not redis_url:
            srv, redis_url = start_redis(workdir / "redis")
            servers.append(srv)
        mongo_uri = opts.mongo
        if not mongo_uri:
            srv, mongo_uri = start_mongo(workdir / "mongo", opts.mongod)
            servers.append(srv)
        store_url = f"{mongo_uri.rstrip('/')}/{job.replace('.', '_')}"
        sd = workdir / "file_sd"
        prom = None
        if not opts.no_prometheus:
            prom = Prometheus(workdir / "prometheus", sd)
            servers.append(prom)
        proxies = [parse_proxy(f"p{i + 1}") for i in range(opts.proxies)]
        with Testbed(hosts=opts.hosts, pages=opts.pages, seed=opts.seed, proxies=proxies) as tb:
            shared = {
                **tb.scrapy_settings(),
                "SCALE_JOB": job,
                "SCALE_FRONTIER_URL": redis_url,
                "SCALE_STORE_URL": store_url,
                "SCALE_EGRESSES": tb.proxy_urls,
                "SCALE_METRICS_PORT": 0,
                "SCALE_METRICS_FILE_SD": str(sd),
                "SCALE_METRICS_INTERVAL": 1.0,
                "SCALE_FRONTIER_WAIT_FOR_SEEDS": True,  # stay up until Prometheus has the final numbers
                "CONCURRENT_REQUESTS": 16,
                "DOWNLOAD_DELAY": 0,
                "LOG_LEVEL": "INFO",
                "TELNETCONSOLE_ENABLED": False,
            }
            # the workers first: they wait for seeds (no start requests of their own)
            for i in range(opts.workers):
                settings = {**shared, "SCALE_FRONTIER_WORKER": f"w{i}", "SCALE_STATE_DIR": str(workdir / f"w{i}")}
                workers.append(scrapy(["crawl", "catalog", "-a", "seeded=1"], settings, workdir / f"w{i}.log"))

            def all_up() -> bool:
                for i, w in enumerate(workers):
                    if w.poll() is not None:
                        raise SystemExit(f"worker w{i} exited ({w.returncode}); see {workdir / f'w{i}.log'}")
                if prom is not None:
                    return prom.targets_up() == opts.workers
                return len(list(sd.glob("*.json"))) == opts.workers

            wait(all_up, 120, f"{opts.workers} workers up" + (" and scraped by Prometheus" if prom else ""))
            # then the feeder: `scrapy scale seed JOB URL...` (a feeder could push to Redis instead)
            seeder = scrapy(["scale", "seed", job, *tb.start_urls], shared, workdir / "seed.log")
            poll(lambda: seeder.poll() is not None, 120)
            stop_if_interrupted()
            if seeder.wait(1) != 0:
                raise SystemExit(f"scrapy scale seed failed; see {workdir / 'seed.log'}")
            total = tb.catalog.list_pages * len(tb.hosts) + len(tb.detail_urls())
            frontier = open_store(redis_url, job)
            try:

                def drained() -> dict[str, int] | None:
                    for i, w in enumerate(workers):
                        if w.poll() is not None:
                            raise SystemExit(f"worker w{i} exited ({w.returncode}); see {workdir / f'w{i}.log'}")
                    c = frontier.counts()
                    busy = c["pending"] + c["delayed"] + c["leased"]
                    return c if busy == 0 and c["done"] + c["failed"] >= total else None

                counts = wait(drained, opts.timeout, "the job to drain", interval=0.5)
            finally:
                frontier.close()
            seen: dict[str, dict[str, float]] = {}
            if prom is not None:
                finished = counts["done"] + counts["failed"]
                rows = count_rows(store_url)
                queries = {
                    "requests": f'scrapy_scale_requests_total{{job="{job}"}}',
                    "items": f'scrapy_scale_items_stored_total{{job="{job}"}}',
                }

                def final() -> bool:  # each worker's counters reach Prometheus at its next scrape
                    seen.update({k: prom.by_worker(q) for k, q in queries.items()})
                    return sum(seen["requests"].values()) == finished and sum(seen["items"].values()) >= rows

                poll(final, 60, 0.5)  # a count still short then is reported, not waited for forever
            for w in workers:
                w.send_signal(signal.SIGINT)
            codes = [w.wait(120) for w in workers]
            stop_if_interrupted()
            proxy_use = Counter(e.proxy for e in tb.proxy_log if e.outcome in ("forwarded", "tunnel"))
            return reconcile(tb, job, counts, total, store_url, seen, codes, proxy_use, opts.workers)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        for srv in reversed(servers):
            srv.stop()


def reconcile(
    tb: Testbed,
    job: str,
    counts: dict[str, int],
    total: int,
    store_url: str,
    seen: dict[str, dict[str, float]],
    codes: list[int],
    proxy_use: Counter[str],
    n_workers: int,
) -> dict[str, Any]:
    store = open_item_store(store_url, "items")
    store.open()
    try:
        rows = [d["url"] for d in store.documents()]
    finally:
        store.close()
    detail = tb.detail_urls()
    problems = []
    if codes != [0] * n_workers:
        problems.append(f"worker exit statuses {codes}")
    if counts["failed"] or counts["done"] != total:
        problems.append(f"frontier {counts}, expected {total} done")
    if len(rows) != len(set(rows)):
        problems.append(f"{len(rows) - len(set(rows))} duplicate rows")
    if set(rows) != detail:
        problems.append(f"stored rows {len(set(rows))} != products {len(detail)}")
    listing = tb.catalog.list_pages * len(tb.hosts)  # the pages that yield links, not items
    if counts["done"] - listing != len(rows):
        problems.append(f"{counts['done'] - listing} completed product requests for {len(rows)} stored rows")
    requests, items = seen.get("requests", {}), seen.get("items", {})
    if seen:
        if sum(requests.values()) != counts["done"] + counts["failed"]:
            problems.append(f"Prometheus counted {sum(requests.values())} completed requests")
        if sum(items.values()) < len(rows):
            problems.append(f"Prometheus counted {sum(items.values())} items stored for {len(rows)} rows")
        if set(requests) - {f"w{i}" for i in range(n_workers)}:
            problems.append(f"requests counted for unknown workers: {requests}")
        problems += split_problems({f"w{i}": requests.get(f"w{i}", 0) for i in range(n_workers)})
    return {
        "job": job,
        "reconciled": not problems,
        "problems": problems,
        "completed_requests": counts["done"] + counts["failed"],
        "completed_product_requests": counts["done"] - listing,
        "frontier": counts,
        "stored_rows": len(rows),
        "duplicates": len(rows) - len(set(rows)),
        "shares": {
            f"w{i}": {"requests": int(requests.get(f"w{i}", 0)), "items": int(items.get(f"w{i}", 0))}
            for i in range(n_workers)
        },
        "egress_requests": dict(sorted(proxy_use.items())),
        "worker_exit": codes,
    }


#: a job of at least this many requests per worker is split fairly: no worker does less
#: than FAIR_PART of its fair share (the job over the workers)
FAIR_FROM = 20
FAIR_PART = 0.5


def split_problems(requests: dict[str, float]) -> list[str]:
    """The split of the completed requests between the workers, if one did less than
    half its fair share of a job of at least FAIR_FROM requests per worker."""
    total = sum(requests.values())
    if not requests or total < FAIR_FROM * len(requests):
        return []
    fair = total / len(requests)
    low = {w: int(n) for w, n in requests.items() if n < FAIR_PART * fair}
    if not low:
        return []
    return [f"unfair split: {low} below half the fair share of {fair:.0f} requests each"]


def render(report: dict[str, Any]) -> str:
    lines = [f"job {report['job']}: {'RECONCILED' if report['reconciled'] else 'NOT RECONCILED'}"]
    lines.append(f"  completed requests {report['completed_requests']} (frontier {report['frontier']})")
    lines.append(f"  product requests   {report['completed_product_requests']} (the others are listing pages)")
    lines.append(f"  stored rows        {report['stored_rows']} ({report['duplicates']} duplicates)")
    total = sum(s["requests"] for s in report["shares"].values()) or 1
    for w, s in report["shares"].items():
        lines.append(f"  {w:<18} {s['requests']:>6} requests ({100 * s['requests'] / total:.0f}%), {s['items']} items")
    lines.append(f"  egresses           {report['egress_requests']}")
    lines += [f"  problem: {p}" for p in report["problems"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--hosts", type=int, default=4, help="testbed target hosts")
    p.add_argument("--pages", type=int, default=100, help="products per host")
    p.add_argument("--proxies", type=int, default=3, help="testbed proxies in the egress pool")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--redis", help="a Redis URL to use instead of starting one (the job's keys stay)")
    p.add_argument("--mongo", help="a MongoDB URI to use instead of starting a server")
    p.add_argument("--mongod", action="store_true", help="start mongod, not SecantusDB")
    p.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus (no per-worker figures)")
    p.add_argument("--job", help="job name (default cluster-<random>)")
    p.add_argument("--workdir", type=Path, help="folder for logs and data (default: a temporary one, removed)")
    p.add_argument("--json", type=Path, help="also write the report here as JSON")
    p.add_argument("--timeout", type=float, default=600, help="seconds the job may take to drain")
    opts = p.parse_args(argv)
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        if opts.workdir:
            opts.workdir.mkdir(parents=True, exist_ok=True)
            report = run(opts, opts.workdir.resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="scale-cluster-") as tmp:
                report = run(opts, Path(tmp))
    except KeyboardInterrupt:  # Ctrl-C: run() stopped the workers and the servers on its way out
        print("interrupted: the workers and the servers are stopped", file=sys.stderr)
        return 130
    print(render(report))
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=1))
    return 0 if report["reconciled"] else 1


if __name__ == "__main__":
    sys.exit(main())
