"""Where a ``scrapy scale`` command looked for a job's state, and what to do when what it
looked for is not there (plain functions of the settings; :mod:`.scale` prints them)."""

from __future__ import annotations

import os
from typing import Any


def no_pool_advice(settings: Any, job: str) -> str:
    """Why ``job`` has no egress state to show, and what to do: no state file where the
    command looked (look elsewhere: SCALE_STATE_DIR / SCALE_FRONTIER_URL), or the job's
    crawls ran without a pool (SCALE_EGRESSES makes one)."""
    from scrapy_scale.egress.shared import sqlite_exists, state_path

    if not sqlite_exists(settings):
        return (
            f"no egress state at {state_path(settings)}: no crawl has run where this command looks; "
            "run it where the crawl runs, or give -s SCALE_STATE_DIR=... (or -s SCALE_FRONTIER_URL=redis://... "
            "when the crawl's frontier is in Redis)"
        )
    return (
        f"job {job!r} has no egress pool in {state_path(settings)}: no crawl of it ran with "
        "SCALE_EGRESSES (without it every request goes out directly); set SCALE_EGRESSES (proxy URLs, "
        "a file or a provider, docs/egress.md) for the crawl to send them through proxies"
    )


def scrapyd_state_note(settings: Any) -> str | None:
    """When the project deploys to scrapyd (a ``[deploy]`` section in its scrapy.cfg) and the
    command looks for the state in a relative SCALE_STATE_DIR: a scrapyd job's state is in
    scrapyd's working folder, not under the folder the command runs in; say where it looked
    and how to reach the scrapyd job's. None otherwise."""
    from scrapy.utils.conf import get_config

    from scrapy_scale.config import core_settings

    if settings.get("SCALE_FRONTIER_URL") or settings.get("JOBDIR"):
        return None
    folder = core_settings.STATE_DIR.get(settings)
    if os.path.isabs(folder):
        return None
    try:
        deploys = [sec for sec in get_config().sections() if sec == "deploy" or sec.startswith("deploy:")]
    except Exception:  # noqa: BLE001 - an unreadable scrapy.cfg: no note
        return None
    if not deploys:
        return None
    return (
        f"note: looked in {os.path.abspath(folder)} (SCALE_STATE_DIR {folder!r}, relative to this folder). "
        "This project deploys to scrapyd (scrapy.cfg [deploy]): its scrapyd jobs keep their state in "
        "scrapyd's working folder; the summary at the end of a scrapyd job's log names the command "
        "that finds it (scrapy scale status JOB -s SCALE_STATE_DIR=...)"
    )
