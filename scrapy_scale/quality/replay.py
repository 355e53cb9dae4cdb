"""``scrapy scale replay JOB --class parse_failed``: the (fixed) spider's callbacks run over
the job's raw snapshots, without a single network request, and what they yield is stored
through the project's item pipelines (validation, then the store). Requests whose replay
ended ``ok`` with every item stored are marked done in the frontier and their snapshots
removed; the others stay failed (and keep their snapshots).

The replay is an ordinary Scrapy crawl of the spider with three components of its own:
``ReplaySpiderMiddleware`` (the start requests are the snapshots' requests; the spider's
own ``start()`` is never consumed), ``ReplayDownloaderMiddleware`` (first in the chain: it
answers each snapshot request with its stored response, and refuses every other request
with ``IgnoreRequest``), and ``ReplayTracker`` (the outcome of each replayed request and of
its items). Scrapy's scheduler replaces the frontier, robots.txt is not fetched, the
quality report and the snapshot keeper are off. With ``--dry-run``, ``ReplayJudge`` takes the
place of the validation and store pipelines: it judges each item as the validation would and
writes nothing.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem, IgnoreRequest
from scrapy.http import Headers
from scrapy.responsetypes import responsetypes
from scrapy.utils.request import request_from_dict

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.context import ScaleContext
from scrapy_scale.errors import ScaleError
from scrapy_scale.outcomes import settings as outcomes_settings
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.quality import settings as quality_settings
from scrapy_scale.quality.validate import Validator

logger = logging.getLogger(__name__)

#: the Request.meta key naming the snapshot a replayed request comes from
SNAPSHOT_META = "scale_replay_snapshot"
#: crawler setting (internal, not a SCALE_* one) carrying the snapshots to replay: {file name: snapshot}
SETTING = "QUALITY_REPLAY_SNAPSHOTS"


@dataclass
class ReplayState:
    """What the replay saw, per snapshot file name."""

    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: snapshot -> the final outcome class and reason
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    #: snapshot -> why an item of it was not stored (quarantined again, dead-lettered, error),
    #: or, in a dry run, would not be
    item_failures: dict[str, str] = field(default_factory=dict)
    ignored_requests: int = 0

    def done(self) -> list[str]:
        return [
            n for n, (cls, _) in self.outcomes.items() if cls in ("ok", "not_found") and n not in self.item_failures
        ]


def state_of(crawler: Crawler) -> ReplayState:
    return ScaleContext.of(crawler).shared(ReplayState, lambda: ReplayState(dict(crawler.settings.get(SETTING) or {})))


class ReplaySpiderMiddleware:
    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        self.state = state_of(crawler)
        runs = {str(s.get("run_id")) for s in self.state.snapshots.values() if s.get("run_id")}
        if len(runs) == 1:  # items keep the run they belong to
            ScaleContext.of(crawler).run_id = runs.pop()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReplaySpiderMiddleware:
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        spider = self.crawler.spider
        for name, snap in self.state.snapshots.items():
            d = dict(snap["request"])
            d["body"] = base64.b64decode(d.get("body") or "")
            d["dont_filter"] = True
            try:
                request = request_from_dict(d, spider=spider)
            except (ValueError, AttributeError, TypeError, KeyError) as e:  # a lost callback, a bad field
                logger.error("replay: snapshot %s cannot be replayed: %s", name, e)
                self.state.outcomes[name] = ("fatal", f"request not rebuilt: {e}")
                continue
            request.meta[SNAPSHOT_META] = name
            request.meta[meta_keys.FINGERPRINT] = snap["fingerprint"]
            yield request


class ReplayDownloaderMiddleware:
    """First downloader middleware: a snapshot request gets its stored response; any other
    request (links the callbacks follow) is refused, so the replay never uses the network."""

    def __init__(self, crawler: Crawler):
        self.state = state_of(crawler)
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReplayDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        name = request.meta.get(SNAPSHOT_META)
        snap = self.state.snapshots.get(name) if name else None
        if snap is None or request.meta.get("_replayed"):
            self.state.ignored_requests += 1
            self.stats.inc_value(K.QUALITY_REPLAY_IGNORED)
            raise IgnoreRequest("replay: no network request (a link the replayed callback followed)")
        request.meta["_replayed"] = True
        headers = Headers({k: v for k, v in snap["headers"].items()})
        body = base64.b64decode(snap["body"])
        cls = responsetypes.from_args(headers=headers, url=snap["url"], body=body)
        return cls(url=snap["url"], status=int(snap["status"]), headers=headers, body=body, request=request)


class ReplayTracker:
    """Extension: the final outcome of each replayed request and what became of its items."""

    def __init__(self, crawler: Crawler):
        self.state = state_of(crawler)
        sig = crawler.signals
        sig.connect(self.on_outcome, signal=scale_signals.outcome)
        sig.connect(self.on_scraped, signal=signals.item_scraped)
        sig.connect(self.on_failed_item, signal=signals.item_dropped)
        sig.connect(self.on_failed_item, signal=signals.item_error)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReplayTracker:
        return cls(crawler)

    @staticmethod
    def _name(request: Request | None) -> str | None:
        return request.meta.get(SNAPSHOT_META) if request is not None else None

    def on_outcome(self, outcome: Outcome, request: Request | None = None, **kw: Any) -> None:
        name = self._name(request)
        if name and outcome.final and not outcome.internal:
            self.state.outcomes[name] = (str(outcome.cls), outcome.reason)

    def on_scraped(self, item: Any = None, response: Any = None, **kw: Any) -> None:
        name = self._name(getattr(response, "request", None))
        if name:
            self.state.stored[name] = self.state.stored.get(name, 0) + 1

    def on_failed_item(
        self, item: Any = None, response: Any = None, exception: Any = None, failure: Any = None, **kw: Any
    ) -> None:
        name = self._name(getattr(response, "request", None))
        if name and isinstance(exception, DryRunDrop):
            if not exception.reasons:
                self.state.stored[name] = self.state.stored.get(name, 0) + 1
            else:
                why = "would be quarantined again: " + "; ".join(exception.reasons)
                self.state.item_failures.setdefault(name, why[:300])
        elif name:
            err = exception if exception is not None else getattr(failure, "value", None)
            self.state.item_failures.setdefault(name, str(err)[:300])


class DryRunDrop(DropItem, ScaleError):
    """A dry run's item, judged and not written: ``reasons`` is why it would be quarantined
    (empty: it would be stored)."""

    def __init__(self, reasons: list[str]):
        super().__init__("replay --dry-run: judged, not written", "DEBUG")
        self.reasons = reasons


class ReplayJudge:
    """Item pipeline of a dry run, in the validation pipeline's place (the store pipeline is
    off): each item is judged with the replay's critical fields and schemas and dropped with
    the verdict (:class:`DryRunDrop`, which the tracker counts), so nothing is written."""

    def __init__(self, crawler: Crawler):
        s = crawler.settings
        self.validator = Validator(outcomes_settings.CRITICAL_FIELDS.get(s), quality_settings.SCHEMAS.get(s))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReplayJudge:
        return cls(crawler)

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        raise DryRunDrop(self.validator.check(item).reasons)
