"""``scrapy scale``: look at and steer a job's persisted frontier from the shell.

Thin glue: argument parsing and printing. The operations live in
:mod:`scrapy_scale.frontier.ops.cli_ops` so they are testable and reusable.

    scrapy scale status JOB [--json]
    scrapy scale watch JOB [--interval S] [--count N]
    scrapy scale seed JOB [URL ...] [--file FILE] [--priority N]
    scrapy scale reset JOB [--keep-learned]
    scrapy scale requeue JOB --class CLASS
    scrapy scale egress JOB [--json]
    scrapy scale report JOB [--run RUN]            (scrapy_scale.quality.cli)
    scrapy scale replay JOB [--class CLASS] [--spider NAME] [--dry-run]
    scrapy scale review JOB [--run RUN] [--verdicts FILE]
    scrapy scale probe URL [URL ...] [--cap N] [--save FILE]  (scrapy_scale.probe.cli)

The frontier is the one named by ``SCALE_FRONTIER_URL`` in the project's
settings (or ``-s SCALE_FRONTIER_URL=...``), so ``status`` works from any
machine pointed at the same Redis, while the job runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from scrapy_scale import config
from scrapy_scale.commands.where import no_pool_advice, scrapyd_state_note
from scrapy_scale.config import ScaleSettingError
from scrapy_scale.egress.report import format_rows
from scrapy_scale.redact import redact_text, redact_url
from scrapy_scale.storage.backends.base import StoreBroken, StoreUnavailable

if TYPE_CHECKING:
    from scrapy_scale.throttle.status import PausedSites

#: egresses shown in ``status`` (``scrapy scale egress JOB`` shows them all)
STATUS_EGRESSES = 10

SUBCOMMANDS = ("status", "seed", "reset", "requeue", "egress", "watch")
#: the data-quality subcommands (scrapy_scale.quality.cli)
QUALITY_SUBCOMMANDS = ("report", "replay", "review")
#: find the concurrency a site takes (scrapy_scale.probe.cli)
PROBE = "probe"


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "{status,seed,reset,requeue,egress,watch,report,replay,review} JOB [URL ...] [options] | probe URL [URL ...]"

    def short_desc(self) -> str:
        return (
            "Inspect and steer a scrapy-scale job's frontier (status, seed, reset, requeue, egress, watch) "
            "and its data quality (report, replay, review)"
        )

    def long_desc(self) -> str:
        return (
            "status JOB: counts by state and failure class, oldest pending age, average wait, "
            "leases per worker, and the workers' rates, ETA and top domains by blocks. watch JOB: the same, "
            "live, redrawn every --interval seconds until Ctrl-C. seed JOB URL... (or --file FILE, one URL a line): add start URLs. reset JOB: forget the job's "
            "frontier, learned pacing and egress state (--keep-learned keeps these two) so the next crawl starts over. requeue JOB --class CLASS: put terminal "
            "failures of that class back to pending. egress JOB: the egress pool's state (each egress's "
            "state, score, requests, failures by class, quarantine, per-domain bans). The frontier is SCALE_FRONTIER_URL "
            "(use -s SCALE_FRONTIER_URL=redis://... to point at another one). "
            "report JOB [--run RUN]: the consistency report of a finished run. replay JOB "
            "[--class parse_failed] [--spider NAME] [--dry-run]: parse the raw snapshots again, without the "
            "network, judged with the settings the crawl recorded (-s overrides), and store the items "
            "(--dry-run: say what would change, write nothing). review JOB [--verdicts FILE]: the sample for a person "
            "to review as CSV/HTML, or read their verdicts back. probe URL [URL ...]: find the concurrency "
            "a site takes (a staircase of load, then a bisection), print a table and a recommended "
            "SCALE_DOMAIN_PROFILES entry, write probe-HOST.json/.png (--out DIR), --save FILE for pacing."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--class",
            dest="failure_class",
            metavar="CLASS",
            help="requeue: the failure class to put back (e.g. blocked)",
        )
        parser.add_argument("--json", dest="as_json", action="store_true", help="status: print JSON instead of text")
        parser.add_argument(
            "--file",
            dest="seed_file",
            metavar="FILE",
            help="seed: read the URLs from FILE, one a line (blank lines skipped), as well as from the arguments",
        )
        parser.add_argument("--priority", type=int, default=0, help="seed: priority of the seeded requests (default 0)")
        parser.add_argument(
            "--run", dest="run_id", metavar="RUN", help="report/review: the run (default: the job's last run)"
        )
        parser.add_argument("--spider", metavar="NAME", help="replay: the spider (default: the snapshots')")
        parser.add_argument(
            "-a",
            dest="spargs",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="replay: spider argument (may be repeated)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="replay: judge the items and say what would change; store, mark and remove nothing",
        )
        parser.add_argument(
            "--verdicts",
            metavar="FILE",
            help="review: read a reviewer's verdicts (the CSV written by review, filled in)",
        )
        parser.add_argument(
            "--keep-learned",
            action="store_true",
            help="reset: keep the job's learned pacing (throttle) and egress health (default: cleared too)",
        )
        parser.add_argument("--interval", type=float, default=2.0, help="watch: seconds between refreshes (default 2)")
        parser.add_argument(
            "--count", type=int, default=None, help="watch: stop after N refreshes (default: until Ctrl-C)"
        )
        from scrapy_scale.probe import cli as probe_cli

        probe_cli.add_options(parser)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        try:
            self._run(args, opts)
            sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        except BrokenPipeError:
            # `scrapy scale status JOB | head`: the reader has what it wanted. Quiet, as other
            # command-line tools are; stdout goes to devnull so the exit's flush says nothing
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            self.exitcode = 1

    def _run(self, args: list[str], opts: argparse.Namespace) -> None:
        from scrapy_scale.frontier.ops import cli_ops

        if args and args[0] in QUALITY_SUBCOMMANDS:
            self._quality(args, opts)
            return
        if args and args[0] == PROBE:
            self._probe(args[1:], opts)
            return
        if not args or args[0] not in SUBCOMMANDS:
            raise UsageError(
                f"expected one of {', '.join(SUBCOMMANDS + QUALITY_SUBCOMMANDS + (PROBE,))}", print_help=False
            )
        sub, rest = args[0], args[1:]
        if not rest:
            raise UsageError(f"{sub}: missing JOB", print_help=False)
        job, extra = rest[0], rest[1:]
        if sub == "seed" and not extra and not opts.seed_file:
            raise UsageError("seed: give at least one URL (or --file FILE)", print_help=False)
        if sub != "seed" and extra:
            raise UsageError(f"{sub}: unexpected arguments {' '.join(extra)}", print_help=False)
        if sub == "requeue" and not opts.failure_class:
            raise UsageError("requeue: --class CLASS is required", print_help=False)
        assert self.settings is not None
        if sub == "egress":
            self._egress(job, opts)
            return
        try:
            with cli_ops.open_job(self.settings, job, must_exist=sub != "seed") as ops:
                if sub == "status":
                    from scrapy_scale.throttle import status as pacing_status

                    st = ops.status()
                    st["pacing"] = pacing_status.read(self.settings, job)
                    st["paused"] = _pauses(self.settings).at(st["pacing"], time.time())
                    pool = self._egress_rows(job)
                    progress = _progress(self.settings, job, st)
                    if opts.as_json:
                        more: dict[str, Any] = {"egress": pool}
                        if progress is not None:
                            more["progress"] = progress
                        print(json.dumps(dict(st, **more), indent=2, sort_keys=True))
                    else:
                        paused = pacing_status.format_paused(st["paused"], time.time())
                        note = scrapyd_state_note(self.settings)
                        if note:
                            print(note)
                        print(cli_ops.format_status(st) + (f"\n{paused}" if paused else ""), end="")
                        print(pacing_status.format_text(st["pacing"]))
                        if pool is not None:
                            print(format_rows(pool[:STATUS_EGRESSES]))
                        if progress is not None:
                            print("\n".join(progress["lines"]))  # type: ignore[arg-type]
                elif sub == "watch":
                    _watch(self.settings, job, ops, opts.interval, opts.count)
                elif sub == "seed":
                    if opts.seed_file:
                        added, n = ops.seed_file(opts.seed_file, priority=opts.priority, urls=extra)
                    else:
                        added, n = ops.seed(extra, priority=opts.priority), len(extra)
                    print(f"{job}: {added} of {n} URL(s) enqueued ({n - added} already known)")
                elif sub == "reset":
                    n = ops.reset()
                    learned, trouble = ("kept", None) if opts.keep_learned else self._forget_learned(job)
                    print(
                        f"{job}: reset ({n} request record(s) removed; learned pacing and egress state "
                        f"{learned}); the next `scrapy crawl` starts the job over"
                    )
                    if trouble is not None:
                        print(f"scrapy scale reset: error: {trouble}", file=sys.stderr)
                        self.exitcode = 1
                else:
                    n = ops.requeue(opts.failure_class)
                    print(f"{job}: {n} request(s) of class {opts.failure_class} put back to pending")
        except (cli_ops.OpError, ScaleSettingError) as e:
            note = scrapyd_state_note(self.settings)
            print(f"scrapy scale {sub}: error: {e}" + (f"\n{note}" if note else ""), file=sys.stderr)
            self.exitcode = 1

    def _forget_learned(self, job: str) -> tuple[str, str | None]:
        """``reset``: forget the job's learned pacing and egress state, as a crawl would find
        them. Returns what became of them, and what failed (None: nothing); the frontier was
        reset already, so a store that cannot be reached is said, not a traceback."""
        from scrapy_scale.egress.shared import forget_job
        from scrapy_scale.redact import redact_text
        from scrapy_scale.throttle import status as pacing_status

        failed = []
        for what, forget in (("learned pacing", pacing_status.forget), ("egress state", forget_job)):
            try:
                forget(self.settings, job)
            except Exception as e:  # noqa: BLE001 - said, with a non-zero exit
                failed.append(f"{what} not cleared ({redact_text(str(e))[:200]})")
        if not failed:
            return "cleared", None
        return "NOT cleared", "; ".join(failed) + "; run the reset again when it can be reached"

    def _egress_rows(self, job: str) -> list[dict[str, Any]] | None:
        from scrapy_scale.egress.report import read_job

        problems: list[str] = []
        try:
            return read_job(self.settings, job, problems)
        except Exception as e:  # the pool's state is extra to status: say why it is missing
            print(f"scrapy scale status: egress state unavailable: {redact_text(str(e))}", file=sys.stderr)
            return None
        finally:
            _warn_skipped("status", problems)

    def _egress(self, job: str, opts: argparse.Namespace) -> None:
        from scrapy_scale.egress.report import read_job

        try:
            assert self.settings is not None
            config.validate_all(self.settings, read_sources=False)
            problems: list[str] = []
            rows = read_job(self.settings, job, problems)
        except ScaleSettingError as e:
            print(f"scrapy scale egress: error: {e}", file=sys.stderr)
            self.exitcode = 1
            return
        _warn_skipped("egress", problems)
        if rows is None:
            print(f"scrapy scale egress: error: {no_pool_advice(self.settings, job)}", file=sys.stderr)
            self.exitcode = 1
            return
        print(json.dumps(rows, indent=2, sort_keys=True) if opts.as_json else format_rows(rows))

    def _probe(self, urls: list[str], opts: argparse.Namespace) -> None:
        from scrapy_scale.probe import cli as probe_cli

        try:
            self.exitcode = probe_cli.main(self.settings, urls, opts)
        except probe_cli.ProbeUsage as e:
            raise UsageError(str(e), print_help=False) from None

    def _quality(self, args: list[str], opts: argparse.Namespace) -> None:
        from scrapy_scale.quality import cli

        sub, rest = args[0], args[1:]
        if len(rest) != 1:
            raise UsageError(
                f"{sub}: expected JOB" if not rest else f"{sub}: unexpected arguments {' '.join(rest[1:])}",
                print_help=False,
            )
        job = rest[0]
        assert self.settings is not None
        try:
            if sub == "report":
                rep = cli.report(self.settings, job, opts.run_id)
                print(cli.format_report(rep))
                if not rep["ok"]:
                    self.exitcode = self.settings.getint("SCALE_QUALITY_EXIT_CODE") or 0
            elif sub == "replay":
                spargs = dict(a.split("=", 1) for a in opts.spargs if "=" in a)
                res = cli.replay(
                    self.settings, job, opts.failure_class or "parse_failed", opts.spider, spargs, opts.dry_run
                )
                print(cli.format_replay(res))
            else:
                print(cli.review(self.settings, job, opts.run_id, opts.verdicts))
        except (cli.QualityError, ScaleSettingError) as e:
            print(f"scrapy scale {sub}: error: {e}", file=sys.stderr)
            self.exitcode = 1
        except (StoreUnavailable, StoreBroken) as e:
            # the item store (history, items) cannot be read: one line, not the driver's traceback
            from scrapy_scale.quality.pipeline import store_url

            why = " ".join(redact_text(str(e)).split()).split(", Topology Description")[0][:300]
            print(
                f"scrapy scale {sub}: error: cannot read the item store {redact_url(store_url(self.settings))}: {why}",
                file=sys.stderr,
            )
            self.exitcode = 1


def _warn_skipped(sub: str, problems: list[str]) -> None:
    """One warning line for the egress state that could not be read (untrusted input)."""
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        shown = "; ".join(problems[:3])
        print(
            f"scrapy scale {sub}: warning: egress state skipped or clamped: {redact_text(shown)}{more}", file=sys.stderr
        )


def _pauses(settings: Any) -> PausedSites:
    """A reader of the job's paused sites (``throttle.status.PausedSites``, clamped to
    SCALE_RETRY_AFTER_MAX): one per command, so a bad pause time is warned about once."""
    from scrapy_scale.outcomes import settings as outcomes_settings
    from scrapy_scale.throttle import status as pacing_status

    return pacing_status.PausedSites(float(outcomes_settings.RETRY_AFTER_MAX.get(settings)))


def _progress(settings: object, job: str, st: dict[str, object]) -> dict[str, object] | None:
    """The workers' published numbers (scrapy_scale.monitor.watch), or None if unreadable."""
    try:
        from scrapy_scale.monitor import watch, worker_status

        sink = worker_status.sink_for(settings, job)
        try:
            v = watch.view(st, sink.read())
        finally:
            sink.close()
    except Exception as e:  # noqa: BLE001 - status itself was read; the extras are a bonus
        print(f"scrapy scale status: the workers' numbers are unavailable: {e}", file=sys.stderr)
        return None
    m = v["merged"]
    return {
        "lines": watch.text_lines(v),
        "eta_seconds": v["eta"],
        "finished_per_second": v["finished_rate"],
        "workers": m["workers"],
        "pages_per_min": m["pages_per_min"],
        "items_per_min": m["items_per_min"],
        "requests": dict(m["requests"]),
        "retries": dict(m["retries"]),
        "items_stored": m["items_stored"],
        "domains": {d: dict(c) for d, c in m["domains"].items()},
        "egress_pool": dict(m["egress_pool"]),
    }


def _watch(settings: Any, job: str, ops: object, interval: float, count: int | None) -> None:
    try:
        import rich  # noqa: F401
    except ImportError:
        raise UsageError(
            "watch needs rich: pip install 'scrapy-scale[all]' (or pip install rich)", print_help=False
        ) from None
    from scrapy_scale.monitor import watch, worker_status
    from scrapy_scale.throttle import status as pacing_status

    rows: list[dict[str, Any]] = []
    pauses = _pauses(settings)  # one for the whole watch: each bad value is warned about once

    def paused() -> list[dict[str, Any]]:
        rows[:] = pacing_status.read(settings, job)
        return pauses.at(rows, time.time())

    def routes() -> str:  # read by paused() just before, in the same frame
        return pacing_status.format_routes(rows)

    sink = worker_status.sink_for(settings, job)
    try:
        watch.run(ops, sink, interval=interval, count=count, paused=paused, routes=routes)
    except KeyboardInterrupt:
        pass
    finally:
        sink.close()
