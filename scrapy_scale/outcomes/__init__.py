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
from scrapy_scale.outcomes.middleware import (
    GaveUpError,
    OutcomeDownloaderMiddleware,
    OutcomeSpiderMiddleware,
)
from scrapy_scale.outcomes.model import DONE_CLASSES, FailureClass, Outcome
from scrapy_scale.outcomes.parsecheck import expects_items
from scrapy_scale.outcomes.policy import ClassPolicy, RetryPolicy

__all__ = [
    "DONE_CLASSES",
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
