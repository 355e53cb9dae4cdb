"""Failure classification and retry policy: classify once, act everywhere.

Enable with the add-on, or alone::

    DOWNLOADER_MIDDLEWARES = {
        "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
        "scrapy_scale.outcomes.OutcomeDownloaderMiddleware": 550,
    }
    SPIDER_MIDDLEWARES = {"scrapy_scale.outcomes.OutcomeSpiderMiddleware": 45}

See docs/outcomes.md.
"""

from scrapy_scale.outcomes.classify import (
    BlockPageDetector,
    Classifier,
    SignatureBlockDetector,
    Verdict,
)
from scrapy_scale.outcomes.emit import OutcomeEmitter, egress_id, fallback_outcome, send_fallback
from scrapy_scale.outcomes.middleware import (
    GaveUpError,
    OutcomeDownloaderMiddleware,
    OutcomeSpiderMiddleware,
)
from scrapy_scale.outcomes.model import (
    CLASSES,
    DONE_CLASSES,
    Blame,
    ClassInfo,
    FailureClass,
    Outcome,
)
from scrapy_scale.outcomes.parse_checks import expects_items
from scrapy_scale.outcomes.policy import ClassPolicy, RetryPolicy
from scrapy_scale.outcomes.retry import retry_request

__all__ = [
    "CLASSES",
    "DONE_CLASSES",
    "Blame",
    "ClassInfo",
    "OutcomeEmitter",
    "egress_id",
    "fallback_outcome",
    "retry_request",
    "send_fallback",
    "BlockPageDetector",
    "ClassPolicy",
    "Classifier",
    "FailureClass",
    "GaveUpError",
    "Outcome",
    "OutcomeDownloaderMiddleware",
    "OutcomeSpiderMiddleware",
    "RetryPolicy",
    "SignatureBlockDetector",
    "Verdict",
    "expects_items",
]
