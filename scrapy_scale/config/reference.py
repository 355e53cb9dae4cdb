"""docs/settings.md, generated from the settings registry.

Every ``SCALE_*`` setting is declared once (:func:`scrapy_scale.config.declare`: name,
default, parser, one line of documentation, component); this module renders them as the
reference page, one section per component. Regenerate after adding or changing a
setting::

    python -m scrapy_scale.config.reference > docs/settings.md

A test fails when the page and the registry disagree.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from scrapy_scale import config

#: (component, heading, the page that explains the component)
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("core", "The job and where state lives", "frontier.md"),
    ("outcomes", "Failure classification and retries", "outcomes.md"),
    ("frontier", "The frontier (the persisted queue)", "frontier.md"),
    ("throttle", "Per-site pacing", "throttle.md"),
    ("egress", "The egress (proxy) pool", "egress.md"),
    ("storage", "The item store", "storage.md"),
    ("quality", "Data quality", "quality.md"),
    ("monitor", "Metrics and monitoring", "monitor.md"),
)

#: settings whose default the registry leaves unset (None, or an empty dict) because the
#: code derives it; the page says in words what a crawl gets
DESCRIBED_DEFAULTS: dict[str, tuple[str, object]] = {
    "SCALE_JOB": ("spider name", None),
    "SCALE_FRONTIER_URL": ("`frontier.db` under `JOBDIR` or `SCALE_STATE_DIR`", None),
    "SCALE_FRONTIER_WORKER": ("`hostname/N`", None),
    "SCALE_THROTTLE_URL": ("the frontier's Redis, else `throttle.db` under `JOBDIR` or `SCALE_STATE_DIR`", None),
    "SCALE_STORE_URL": ("`items.sqlite` under `JOBDIR` or `SCALE_STATE_DIR`", None),
    "SCALE_STORE_DEAD_LETTER": ("`<collection>_dead_letter`", None),
    "SCALE_STORE_FIELDS": ("`_first_seen`, `_last_seen`, `_run_id`, `_job`, `_source_url`, `_item_type`", {}),
    "SCALE_QUALITY_QUARANTINE": ("`<collection>_quarantine`", None),
    "SCALE_QUALITY_HISTORY": ("`<collection>_quality_runs`", None),
    "SCALE_QUALITY_DIR": ("`quality/<job>` under `JOBDIR` or `SCALE_STATE_DIR`", None),
    "SCALE_QUALITY_FINISH_REASON": ("unchanged", None),
    "SCALE_METRICS_FILE_SD": ("`prometheus/` under `SCALE_STATE_DIR`", None),
}

HEADER = """\
# Settings

Every `SCALE_*` setting, its default and what it does, generated from the settings
registry (`python -m scrapy_scale.config.reference > docs/settings.md`; a test fails when
this page and the code disagree).

Every setting works from `settings.py` and from the command line (`-s NAME=VALUE`): a list
setting takes what Scrapy's `getlist` takes, a list or a comma-separated string
(`-s SCALE_CRITICAL_FIELDS=sku,price`); a dict setting takes a dict or its JSON. Each
value is checked when the crawl starts: a bad value or an unknown `SCALE_*` name stops it
with one line naming the setting (exit status 1). A default of *off* means the feature
does nothing until the setting is given.
"""


def literal(value: Any) -> str:
    """A default as Python would write it in settings.py (lists and dicts as JSON)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return repr(value)


def default_cell(name: str, value: Any) -> str:
    if name in DESCRIBED_DEFAULTS:
        return DESCRIBED_DEFAULTS[name][0]
    if value is None:
        return "off"
    text = f"`{literal(value)}`"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2**20 and value % 2**20 == 0:
        text += f" ({value // 2**20} MiB)"
    return text


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    config.load_declarations()
    by_component: dict[str, list[config.Setting]] = {}
    for s in config.REGISTRY.values():
        by_component.setdefault(s.component, []).append(s)
    known = {c for c, _, _ in SECTIONS}
    unknown = sorted(set(by_component) - known)
    if unknown:
        raise ValueError(f"settings of components with no section here: {unknown}")
    out = [HEADER]
    for component, heading, page in SECTIONS:
        settings = by_component.get(component, [])
        if not settings:
            continue
        out.append(f"\n## {heading}\n\nSee [{page}]({page}).\n\n| setting | default | meaning |\n|---|---|---|")
        for s in settings:
            out.append(f"| `{s.name}` | {default_cell(s.name, s.default)} | {cell(s.doc)} |")
    return "\n".join(out) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
