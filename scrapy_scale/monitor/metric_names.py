"""What the counting (:mod:`.metrics`) and the metric families (:mod:`.exposition`) agree
on: the metric name prefix, the retry-depth buckets, the queue states and the failure
classes. Plain constants, no prometheus-client; its own module so neither of the two
imports the other's internals."""

from __future__ import annotations

from scrapy_scale.outcomes.model import DONE_CLASSES, FailureClass

PREFIX = "scrapy_scale_"
#: upper bounds of the attempts-per-request histogram (retry depth)
DEPTH_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10)
#: frontier states exported as ``scrapy_scale_queue_requests{state=...}``
QUEUE_STATES = ("pending", "delayed", "leased", "done", "failed")
#: the classes counted as failures (every class but the done ones)
FAILURE_CLASSES = frozenset(c for c in FailureClass if c not in DONE_CLASSES)
