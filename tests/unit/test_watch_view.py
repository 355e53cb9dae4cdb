"""`scrapy scale watch`'s drawing (scrapy_scale/monitor/watch.py renderable) in a terminal of
80 columns, the width a new user's terminal has."""

from __future__ import annotations

import io

import pytest

from scrapy_scale.monitor.watch import renderable, view

pytestmark = pytest.mark.pure


def test_the_title_fits_in_80_columns_and_the_table_holds_numbers() -> None:
    """Issue 31: `watch` wrapped its title at 80 columns (the frontier's URL was on it)."""
    pytest.importorskip("rich")
    from rich.console import Console

    st = {
        "job": "catalog",
        "frontier": "sqlite:////home/me/projects/scrapy-scale/example_project/.scale/frontier.db",
        "run": {"id": 3, "state": "running"},
        "counts": {"pending": 0, "delayed": 72, "leased": 4, "done": 120, "failed": 1},
        "delayed_retries": 0,
        "dead_letters": 0,
    }
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(renderable(view(st, [], None, now=1000.0)))
    lines = console.export_text().splitlines()
    assert lines[0].rstrip() == "scrapy-scale job catalog  run 3: running", lines
    assert lines[1].startswith("frontier sqlite:////home/me/"), lines
    assert all(len(line.rstrip()) <= 80 for line in lines), lines
    assert "72 delayed (0 retry backoff, 72 held by pacing)" in lines, lines  # one line, not a wrapped cell
