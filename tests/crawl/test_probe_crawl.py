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
from scrapy_scale.probe.figures import StepFigures
from scrapy_scale.probe.run import SiteProbe
from scrapy_scale.testbed import Capacity, Testbed
from scrapy_scale.throttle import probed
from tests.support.crawling import ROOT, run_crawl
from tests.support.hang import hang_guard

# serial per test: the probe drives a site as hard as the machine can (SERIAL_LAST); its
# usage errors send no request and run in the parallel part
pytestmark = pytest.mark.crawl


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


def has_vertical_line(png: Path, hex_color: str, min_len: int = 150) -> bool:
    """Does the decoded PNG hold a column of at least ``min_len`` pixels of this colour (a
    marker across the plot, not only its legend's short horizontal handle)?"""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[:, :, :3]
    want = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(img - want).max(axis=2) < 0.03).sum(axis=0).max()) >= min_len


def png_size(png: Path) -> tuple[int, int]:
    import matplotlib.image as mpimg

    h, w = mpimg.imread(str(png)).shape[:2]
    return w, h


def errors_caused(tb: Testbed, host: str) -> tuple[int, int]:
    """(answers that were not 200, all answers but robots.txt) the testbed gave ``host``."""
    served = [r for r in tb.log if r.host == host and r.kind != "robots"]
    return sum(1 for r in served if r.status != 200), len(served)


@pytest.mark.serial
def test_finds_the_knee_of_a_host_whose_latency_degrades_and_saves_it(tmp_path: Path) -> None:
    knee = 12
    # answers of 200 ms: the 2-core test machine, loaded, delays a timer by 100 ms at times,
    # which must stay well under the 2x latency rule
    with Testbed(hosts=2, pages=100, capacity={1: Capacity("knee", concurrency=knee, latency=0.2)}) as tb:
        saved = tmp_path / "probed.json"
        code, text, fig = probe(tb, 1, tmp_path, "--save", str(saved))
        assert code == 0, text
        res = fig["result"]
        steps = res["steps"]
        # the staircase: the knee within one step (8 good, 16 bad), each as it ended (a step may
        # run again: client-bound, or to confirm a slowdown)
        ramp = {s["concurrency"]: s["verdict"] for s in steps if s["phase"] == "ramp"}
        assert ramp == {1: "good", 2: "good", 4: "good", 8: "good", 16: "bad"}, text
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
        for color in (report.GOODPUT_COLOR, report.LATENCY_COLOR):
            assert has_color(png, color), color
        assert has_vertical_line(png, report.KNEE_COLOR)
        assert not has_color(png, report.CLIENT_BOUND_COLOR)


@pytest.mark.serial
def test_finds_the_rate_of_a_token_bucket_stopping_at_the_first_429(tmp_path: Path) -> None:
    rate = 48.0  # about 9.6 in flight at 200 ms
    with Testbed(hosts=1, pages=100, capacity={1: Capacity("bucket", rate=rate, burst=10, latency=0.2)}) as tb:
        # steps of 4 s: each refused step costs about one 429, so the good ones must weigh more
        code, text, fig = probe(tb, 1, tmp_path, "--step-seconds", "4")
        assert code == 0, text
        res = fig["result"]
        # the ramp stops at the first 429 and brackets the knee within one step
        steps = res["steps"]
        first_bad = next(s for s in steps if s["phase"] == "ramp" and s["verdict"] == "bad")
        assert first_bad["rate_limited"], text
        assert first_bad["concurrency"] / 2 <= res["knee"] < first_bad["concurrency"], text
        # after the bisection: the knee takes at most the bucket's rate, and one more request
        # in flight at the knee's own latency would reach it (within 15%). Stated at the
        # knee's latency, since on a loaded machine the latency itself moves between steps
        knee_rate = res["knee_goodput"]
        assert knee_rate <= 1.05 * rate, text
        assert knee_rate * (res["knee"] + 1) / res["knee"] >= 0.85 * rate, text
        bad, total = errors_caused(tb, tb.hosts[0])
        assert 0 < bad <= 0.01 * total, (bad, total, text)
        # never more than twice the load of the last good step
        good = 0
        for s in res["steps"]:
            assert s["concurrency"] <= max(1, 2 * good)
            if s["verdict"] == "good":
                good = max(good, s["concurrency"])
        png = tmp_path / f"probe-{tb.hosts[0]}.png"
        assert has_vertical_line(png, report.KNEE_COLOR) and has_color(png, report.CLASS_COLORS["rate_limited"], 5)


@pytest.mark.serial
def test_a_host_limited_below_one_request_at_a_time_gets_a_rate(tmp_path: Path) -> None:
    rate = 8.0
    with Testbed(hosts=1, pages=100, capacity={1: Capacity("bucket", rate=rate, burst=2, latency=0.05)}) as tb:
        code, text, fig = probe(tb, 1, tmp_path, "--min-answers", "20")
        assert code == 0, text
        res = fig["result"]
        assert res["steps"][0]["phase"] == "ramp" and res["steps"][0]["rate_limited"], text
        assert {s["phase"] for s in res["steps"][1:]} == {"rate"}, text
        assert fig["recommendation"][tb.hosts[0]]["concurrency"] == 1
        # each refused rate costs about one 429 (the step stops at the first)
        bad_steps = sum(1 for s in res["steps"] if s["verdict"] == "bad")
        assert tb.count(kind="rate_limited") <= 2 * bad_steps, text
        png = tmp_path / f"probe-{tb.hosts[0]}.png"
        assert has_vertical_line(png, report.KNEE_COLOR) and has_color(png, report.GOODPUT_COLOR)


@pytest.mark.serial
def test_a_host_that_is_never_the_limit_is_flagged_client_bound(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=100, keep_log=False, capacity={1: Capacity("unlimited", latency=0.0)}) as tb:
        saved = tmp_path / "probed.json"
        code, text, fig = probe(tb, 1, tmp_path, "--save", str(saved), "--cap", "256")
        res = fig["result"]
        assert res["client_bound"], text
        assert "CLIENT-BOUND" in text
        # the site was never judged bad: a step bad by goodput alone is run again to confirm
        # (a loaded machine's noise); the last verdict at each concurrency is what counts
        last = {(s["phase"], s["concurrency"]): s["verdict"] for s in res["steps"]}
        assert "bad" not in last.values(), text
        assert probed.read(str(saved)) == {}  # no knee of the site to start pacing from
        # nothing recommended, and it says what to do instead
        assert "recommended" not in text and "no recommendation" in text, text
        assert f"not saved: {tb.hosts[0]} (client-bound" in text and fig["recommendation"] is None
        answers = sum(n for (host, k), n in tb.counters.items() if isinstance(k, int))
        assert answers > 0 and tb.counters[(tb.hosts[0], 200)] == answers  # no error caused
        png = tmp_path / f"probe-{tb.hosts[0]}.png"
        assert has_color(png, report.CLIENT_BOUND_COLOR) and has_color(png, report.GOODPUT_COLOR)
        assert not has_color(png, report.KNEE_COLOR)


@pytest.mark.serial
def test_max_time_cuts_the_step_running_when_it_is_up(tmp_path: Path) -> None:
    # steps of at least 4 s against a budget of 1.5 s: the step running is cut at 1.5 s
    with Testbed(hosts=1, pages=100, capacity={1: Capacity("unlimited", latency=0.05)}) as tb:
        code, text, fig = probe(tb, 1, tmp_path, "--no-plot", "--step-seconds", "4", "--max-time", "1.5")
        res = fig["result"]
        assert "max time" in res["ended"], text
        judged = sum(s["seconds"] for s in res["steps"])  # each step's window after its 0.5 s warm-up
        assert 0 < judged < 2.5, text  # uncut, the first step alone holds 4 s of it


@pytest.mark.serial
def test_robots_txt_is_obeyed(tmp_path: Path) -> None:
    with Testbed(hosts=2, pages=10, robots_disallow=["/item/"], robots_crawl_delay={2: 2}) as tb:
        code, text, fig = probe(tb, 1, tmp_path, "--no-plot", paths=3)
        assert code == 1 and "robots.txt disallows every URL given" in text, text
        code, text, fig = probe(tb, 2, tmp_path, "--no-plot", paths=3, under="/list/")
        assert code == 1 and "Crawl-delay 2 s between requests: not probed, since a probe cannot keep it" in text, text
        assert {r.kind for r in tb.log} == {"robots"} and len(tb.log) == 2


@pytest.mark.serial
def test_a_crawl_paces_from_the_saved_probe_file(tmp_path: Path) -> None:
    from tests.crawl.test_throttle_crawl import max_in_window

    path = tmp_path / "probed.json"
    with Testbed(hosts=2, pages=30, per_page=10, seed=2) as tb:
        site = SiteProbe(tb.hosts[0], [])
        site.result.knee = StepFigures(concurrency=5, phase="bisect", goodput=2.5)
        report.save_profiles(str(path), [site], 0.8)  # concurrency 4, max_rate 2.0
        doc = json.loads(path.read_text())
        doc["profiles"]["*.example.test"] = {"max_rate": 100}  # not a host: skipped, with a warning
        path.write_text(json.dumps(doc))
        res = run_crawl(tb, {"SCALE_PROBE_PROFILES": str(path)}, tmp_path, timeout=200)
        assert res.returncode == 0, res.tail()
        assert len(res.items) == 60
        paced = sorted(r.time for r in tb.log if r.host == tb.hosts[0] and r.kind != "robots")
        other = sorted(r.time for r in tb.log if r.host == tb.hosts[1] and r.kind != "robots")
    assert "probe profiles skipped from" in res.log and "*.example.test" in res.log
    assert len(paced) == len(other) == 33
    assert max_in_window(paced, 2.0) <= 5  # 2 requests/s, as probed
    assert paced[-1] - paced[0] >= 14.0
    assert other[-1] - other[0] < paced[-1] - paced[0]  # the other host keeps its own pacing


def scale(*args: str, cwd: Path, pythonpath: str = str(ROOT)) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "scale", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=hang_guard(120),
    )


def test_bad_usage_is_one_line_and_nothing_is_requested(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=5) as tb:
        url = f"http://{tb.hosts[0]}:{tb.port}/item/1"
        hosts = "TESTBED_HOSTS=" + json.dumps(tb.addresses)
        bad = tmp_path / "bad.json"
        bad.write_text("{not json")
        fake = tmp_path / "nomatplotlib" / "matplotlib"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("raise ImportError('matplotlib hidden by the test')\n")
        cases = [
            ((), "probe: give at least one URL"),
            (("ftp://x.test/",), "not an http(s) URL with a host: 'ftp://x.test/'"),
            ((url, "--cap", "0"), "probe: cap, min answers and max requests must be at least 1"),
            ((url, "--margin", "2"), "probe: margin must be in (0, 1]"),
            ((url, "--timeout", "0"), "--timeout must be above 0"),
            ((url, "--save", str(bad)), f"--save {bad}: cannot be read as a probe profile file"),
        ]
        for args, message in cases:
            r = scale("probe", *args, "-s", hosts, cwd=tmp_path)
            assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
            assert "Traceback" not in r.stderr
        r = scale("probe", url, "-s", hosts, cwd=tmp_path, pythonpath=f"{fake.parent}{os.pathsep}{ROOT}")
        assert r.returncode == 2 and "the plot needs matplotlib: pip install 'scrapy-scale[probe]'" in r.stderr, (
            r.stderr
        )
        assert len(tb.log) == 0  # none of them sent a request
