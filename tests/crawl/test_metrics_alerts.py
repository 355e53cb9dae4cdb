"""The alert rules and the Grafana dashboard (docs/prometheus-alerts.yml,
docs/grafana-dashboard.json), checked with the real promtool: rules that load, alerts that
fire on a series that should fire them and stay quiet on one that should not, and the
context-leak alert fed with the gauge of a real crawl whose spider never closes its pages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from scrapy_scale.monitor.metrics import CrawlMetrics
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.testbed import Testbed
from tests.support.crawling import start_crawl
from tests.support.hang import hang_guard
from tests.support.prom_services import http_get, promtool, sd_targets, wait_for

pytestmark = pytest.mark.crawl

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus-alerts.yml"
RULE_TESTS = ROOT / "tests" / "support" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"


def alert_names(text: str) -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)\s*$", text, flags=re.M)


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    res = promtool("check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_every_alert_fires_on_a_bad_series_and_stays_quiet_on_a_good_one() -> None:
    res = promtool("test", "rules", str(RULE_TESTS), cwd=RULE_TESTS.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    tests = RULE_TESTS.read_text()
    for name in alert_names(RULES.read_text()):
        assert f"alertname: {name}" in tests, f"{name} has no promtool test"
    # each test names a job that must fire ("bad") and has one that must not ("fine"): an
    # exp_alerts list is the exact set of firing alerts, so the fine series are checked quiet
    assert tests.count('job="bad"') >= len(alert_names(RULES.read_text()))
    assert tests.count('job="fine"') >= len(alert_names(RULES.read_text()))


def test_a_broken_rule_fails_its_promtool_test(tmp_path: Path) -> None:
    """The tests above can fail: a success-rate threshold that no longer fires is caught."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests" / "support" / "prometheus").mkdir(parents=True)
    (tmp_path / "docs" / "prometheus-alerts.yml").write_text(
        RULES.read_text().replace(
            "job:scrapy_scale_success_ratio:rate10m < 0.8", "job:scrapy_scale_success_ratio:rate10m < 0.3"
        )
    )
    (tmp_path / "tests" / "support" / "prometheus" / "alerts_test.yml").write_text(RULE_TESTS.read_text())
    res = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path / "tests" / "support" / "prometheus")
    assert res.returncode != 0 and "ScrapySuccessRateLow" in res.stdout + res.stderr


def test_the_dashboard_queries_are_valid_promql_over_exported_metrics(tmp_path: Path) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    # promtool parses each expression as a recording rule (with the $job variable filled in)
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:expr{i}", "expr": e.replace("$job", ".*")} for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    res = promtool("check", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    m = CrawlMetrics("j", "s", "w")
    m.set_frontier({"counts": {}, "oldest_pending_age": 1.0, "average_wait": 1.0, "dead_letters": 0})
    m.download_slots = m.browser_contexts = m.browser_processes = 0
    m.egress_pool = {"healthy": 1}
    m.domain_delay = {"a": 1.0}
    for cls in (FailureClass.BLOCKED, FailureClass.RATE_LIMITED):  # every labelled counter has a sample
        m.on_outcome(Outcome("f", "http://a/", "a", cls, egress="p:1"))
    exported = set(re.findall(r"^(scrapy_scale_\w+)", generate_latest(m.registry()).decode(), flags=re.M))
    used = set(re.findall(r"scrapy_scale_\w+", " ".join(exprs)))
    assert used <= exported, used - exported
    exprs_text = "\n".join(
        line for line in RULES.read_text().splitlines() if not line.lstrip().startswith(("#", "- name:"))
    )
    # job:scrapy_scale_backlog:max and friends are the file's own recording rules
    used_in_rules = set(re.findall(r"(?<![:\w])scrapy_scale_\w+(?!:)", exprs_text))
    assert used_in_rules <= exported, used_in_rules - exported


def live_contexts(tmp_path: Path, spider: str, samples: int) -> list[float]:
    """The crawl's scrapy_scale_browser_contexts, once per metrics read (each time the
    requests counter has moved), ``samples`` times."""
    sd = tmp_path / f"sd-{spider}"
    settings = {
        "SPIDER_MODULES": ["tests.support.metrics_spiders"],
        "SCALE_METRICS_PORT": 0,
        "SCALE_METRICS_FILE_SD": str(sd),
        "SCALE_METRICS_INTERVAL": 0.5,
        "SCALE_JOB": spider,
        "CONCURRENT_REQUESTS": 2,
        "DOWNLOAD_DELAY": 0.05,
    }
    seen: list[float] = []
    with Testbed(hosts=1, pages=400) as tb:
        proc = start_crawl(tb, settings, tmp_path, spider=spider)
        try:
            addr = wait_for(lambda: sd_targets(sd), 90, "the crawl's file_sd file")[0]
            last = {"requests": -1.0}

            def next_read() -> bool:
                text = http_get(f"http://{addr}/metrics")
                req = sum(float(v) for v in re.findall(r"^scrapy_scale_requests_total\{[^}]*\} (\S+)", text, re.M))
                ctx = re.search(r"^scrapy_scale_browser_contexts\{[^}]*\} (\S+)", text, re.M)
                if ctx is None or req == last["requests"]:
                    return False
                last["requests"] = req
                seen.append(float(ctx.group(1)))
                return True

            for _ in range(samples):
                wait_for(next_read, 60, f"{spider}: a new metrics read", interval=0.05)
        finally:
            proc.kill()
            proc.wait(hang_guard(30))
    return seen


def test_a_spider_that_never_closes_its_pages_fires_the_context_leak_alert(tmp_path: Path) -> None:
    n = 30
    leaky = live_contexts(tmp_path, "leaky_pages", n)
    tidy = live_contexts(tmp_path, "tidy_pages", n)
    assert leaky == sorted(leaky) and leaky[-1] - leaky[0] > 20, leaky  # the gauge climbs
    assert max(tidy) <= 3, tidy  # pages closed: nothing piles up
    # the observed series, one sample a minute, into the leak alert's promtool test
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'scrapy_scale_browser_contexts{job="leaky_pages",spider="leaky_pages",worker="w"}',
                        "values": " ".join(f"{v:g}" for v in leaky),
                    },
                    {
                        "series": 'scrapy_scale_browser_contexts{job="tidy_pages",spider="tidy_pages",worker="w"}',
                        "values": " ".join(f"{v:g}" for v in tidy),
                    },
                ],
                "alert_rule_test": [
                    {
                        "eval_time": f"{n - 1}m",
                        "alertname": "ScrapyBrowserContextLeak",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "job": "leaky_pages",
                                    "spider": "leaky_pages",
                                    "worker": "w",
                                    "severity": "warning",
                                },
                                "exp_annotations": {
                                    "summary": "leaky_pages on w: browser contexts are leaking",
                                    "description": "Live browser contexts grew by more than 5 in 15 minutes without one "
                                    "closing: pages or contexts are opened and never closed (the process "
                                    "will run out of memory).",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "leak_test.yml"
    path.write_text(json.dumps(test, indent=1))
    res = promtool("test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr + "\nleaky " + repr(leaky) + "\ntidy " + repr(tidy)
