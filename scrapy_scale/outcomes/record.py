"""An extension that writes every outcome to a JSON-lines file (``SCALE_OUTCOME_LOG``).

For debugging a crawl ("why was this URL not retried?") and for tests. One line per
outcome of a crawl request (Scrapy's own downloads, ``internal`` outcomes, are left
out): the :class:`~scrapy_scale.outcomes.model.Outcome` fields plus ``time``.
The request URL is written redacted (:func:`scrapy_scale.redact.redact_url`: no
``user:pass@``, no secret query values), and so are URLs inside the reason and the
exception text; the request itself goes out as it was. Egress ids never carry
credentials, so the file holds no secrets.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import IO, Any

from scrapy import signals as scrapy_signals
from scrapy.exceptions import NotConfigured

from scrapy_scale import config, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale.outcomes import settings as oset
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.redact import redact_text, redact_url


class OutcomeLog:
    def __init__(self, path: str):
        self.path = path
        self.file: IO[str] | None = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Any) -> OutcomeLog:
        path = oset.OUTCOME_LOG.get(crawler.settings)
        if not path:
            raise NotConfigured
        try:
            ext = cls(path)
        except OSError as e:  # a bad path stops the crawl at startup, naming the setting
            raise config.ScaleSettingError(
                oset.OUTCOME_LOG.name, f"cannot open {path!r} for appending: {e.strerror or e}"
            ) from None
        crawler.signals.connect(ext.record, signal=scale_signals.outcome)
        crawler.signals.connect(ext.close, signal=scrapy_signals.engine_stopped)
        return ext

    def record(self, outcome: Outcome, **kwargs: Any) -> None:
        if self.file is None or outcome.internal:  # crawl requests only (not robots.txt, media)
            return
        d = asdict(outcome)
        d["cls"] = outcome.cls.value
        d["url"] = redact_url(outcome.url)
        for key in ("reason", "exception"):
            if d[key]:
                d[key] = redact_text(str(d[key]))
        d["time"] = time.time()
        self.file.write(json.dumps(d, default=str) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
