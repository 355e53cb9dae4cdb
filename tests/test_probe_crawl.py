"""`scrapy scale probe` against testbed hosts of known capacity (a real subprocess, real
HTTP on loopback): the knee found, the errors it caused, the client-bound case, the PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scrapy_scale.probe import report
from scrapy_scale.testbed import Capacity, Testbed
from scrapy_scale.throttle import probed
from tests.crawling import ROOT

pytestmark = [pytest.mark.crawl, pytest.mark.serial]


def probe(
    tb: Testbed, host: int, out: Path, *args: str, paths: int = 40, under: str = "/item/", timeout: float = 240
) -> tuple[int, str, dict[str, Any]]:
    name = tb.hosts[host - 1]
    urls = [f"http://{name}:{tb.port}{under}{i}" for i in range(1, paths + 1)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-m",
        "scrapy",
        "scale",
        "probe",
        *urls,
        "--out",
        str(out),
        "--step-seconds",
        "2",
        "-s",
        "TESTBED_HOSTS=" + json.dumps(tb.addresses),
        *args,
    ]
    r = subprocess.run(cmd, env=env, cwd=out, capture_output=True, text=True, timeout=timeout)
    text = r.stdout + r.stderr
    figures = out / f"probe-{name}.json"
    return r.returncode, text, json.loads(figures.read_text()) if figures.exists() else {}


def has_color(png: Path, hex_color: str, min_pixels: int = 20) -> bool:
    """Does the decoded PNG hold at least ``min_pixels`` pixels of this colour?"""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[:, :, :3]
    want = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(img - want).max(axis=2) < 0.03).sum()) >= min_pixels


def png_size(png: Path) -> tuple[int, int]:
    import matplotlib.image as mpimg

    h, w = mpimg.imread(str(png)).shape[:2]
    return w, h


def errors_caused(tb: Testbed, host: str) -> tuple[int, int]:
    """(answers that were not 200, all answers but robots.txt) the testbed gave ``host``."""
    served = [r for r in tb.log if r.host == host and r.kind != "robots"]
    return sum(1 for r in served if r.status != 200), len(served)


def test_finds_the_knee_of_a_host_whose_latency_degrades_and_saves_it(tmp_path: Path) -> None:
    knee = 12
    with Testbed(hosts=2, pages=100, capacity={1: Capacity("knee", concurrency=knee, latency=0.1)}) as tb:
        saved = tmp_path / "probed.json"
        code, text, fig = probe(tb, 1, tmp_path, "--save", str(saved))
        assert code == 0, text
        res = fig["result"]
        steps = res["steps"]
        ramp = [s["concurrency"] for s in steps if s["phase"] == "ramp"]
        assert ramp == [1, 2, 4, 8, 16], text  # the staircase: the knee within one step (8 good, 16 bad)
        assert [s["verdict"] for s in steps if s["phase"] == "ramp"] == ["good"] * 4 + ["bad"], text
        assert abs(res["knee"] - knee) <= 0.15 * knee, text  # after the bisection
        assert not res["client_bound"]
        bad, total = errors_caused(tb, tb.hosts[0])
        assert bad <= 0.01 * total
        assert tb.count(host=tb.hosts[1]) == 0  # only the given host
        rec = fig["recommendation"][tb.hosts[0]]
        assert rec["concurrency"] == int(res["knee"] * 0.8)
        assert 0 < rec["max_rate"] < res["knee_goodput"]
        assert "recommended (knee x 0.8): SCALE_DOMAIN_PROFILES" in text
        assert probed.read(str(saved)) == {tb.hosts[0]: rec}
        png = tmp_path / f"probe-{tb.hosts[0]}.png"
        assert png_size(png) == (800, 700)
        for color in (report.GOODPUT_COLOR, report.LATENCY_COLOR, report.KNEE_COLOR):
            assert has_color(png, color), color
        assert not has_color(png, report.CLIENT_BOUND_COLOR)


def test_finds_the_rate_of_a_token_bucket_stopping_at_the_first_429(tmp_path: Path) -> None:
    rate = 190.0
    with Testbed(hosts=1, pages=100, capacity={1: Capacity("bucket", rate=rate, burst=10, latency=0.05)}) as tb:
        code, text, fig = probe(tb, 1, tmp_path)
        assert code == 0, text
        res = fig["result"]
        assert any(s["rate_limited"] and s["verdict"] == "bad" for s in res["steps"]), text
        assert 0.85 * rate <= res["knee_goodput"] <= 1.05 * rate, text
        bad, total = errors_caused(tb, tb.hosts[0])
        assert 0 < bad <= 0.01 * total, (bad, total, text)
        # never more than twice the load of the last good step
        good = 0
        for s in res["steps"]:
            assert s["concurrency"] <= max(1, 2 * good)
            if s["verdict"] == "good":
                good = max(good, s["concurrency"])
        png = tmp_path / f"probe-{tb.hosts[0]}.png"
        assert has_color(png, report.KNEE_COLOR) and has_color(png, report.CLASS_COLORS["rate_limited"], 5)


def test_a_host_that_is_never_the_limit_is_flagged_client_bound(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=100, keep_log=False, capacity={1: Capacity("unlimited", latency=0.0)}) as tb:
        saved = tmp_path / "probed.json"
        code, text, fig = probe(tb, 1, tmp_path, "--save", str(saved), "--cap", "256")
        res = fig["result"]
        assert res["client_bound"], text
        assert "CLIENT-BOUND" in text
        assert not any(s["verdict"] == "bad" for s in res["steps"]), text  # the site was never judged bad
        assert probed.read(str(saved)) == {}  # no knee of the site to start pacing from
        png = tmp_path / f"probe-{tb.hosts[0]}.png"
        assert has_color(png, report.CLIENT_BOUND_COLOR) and has_color(png, report.GOODPUT_COLOR)
        assert not has_color(png, report.KNEE_COLOR)


def test_robots_txt_is_obeyed(tmp_path: Path) -> None:
    with Testbed(hosts=2, pages=10, robots_disallow=["/item/"], robots_crawl_delay={2: 2}) as tb:
        code, text, fig = probe(tb, 1, tmp_path, "--no-plot", paths=3)
        assert code == 1 and "robots.txt disallows every URL given" in text, text
        code, text, fig = probe(tb, 2, tmp_path, "--no-plot", paths=3, under="/list/")
        assert code == 1 and "Crawl-delay 2" in text, text
        assert {r.kind for r in tb.log} == {"robots"} and len(tb.log) == 2
