"""A plain function subscribed to ``scrapy_scale.signals.outcome`` in a real crawl (the
extension below only connects it), writing what it receives as JSON lines."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from scrapy_scale import signals as scale_signals

PATH: list[str] = []


def record(outcome: Any, request: Any = None, spider: Any = None, **kw: Any) -> None:
    d = asdict(outcome)
    d["request_url"] = request.url if request is not None else None
    with open(PATH[0], "a") as f:
        f.write(json.dumps(d, default=str) + "\n")


class Connect:
    @classmethod
    def from_crawler(cls, crawler: Any) -> Connect:
        PATH[:] = [crawler.settings["TEST_OUTCOMES_FILE"]]
        crawler.signals.connect(record, signal=scale_signals.outcome, weak=False)
        return cls()
