"""Exceptions that cross package boundaries (so no package imports another's internals).

Every error of the project derives from :class:`ScaleError` (``except ScaleError``
catches any of them); each also keeps the builtin base it had (ValueError,
RuntimeError), so existing ``except`` clauses keep working.
"""

from scrapy.exceptions import IgnoreRequest


class ScaleError(Exception):
    """Base class of scrapy-scale's own errors."""


class ItemNotStored(ScaleError):
    """An item pipeline could not store the item (the store broke, or the crawl shut down
    during an outage). Sent with Scrapy's ``item_error``: the frontier must not ack the
    item's request, so a resumed crawl fetches it again."""


class ItemDeadLettered(ScaleError):
    """Marker: an item pipeline sent the item to the dead letter (it can never be stored as
    it is). Carried by the ``DropItem`` (or ``TypeError``) the pipeline raises: the frontier
    records the item's request as failed (``parse_failed``) instead of done, so the page can
    be crawled again (``scrapy scale requeue JOB parse_failed``) once the spider is fixed."""

    reason: str = ""
    #: how the frontier's failure reason names what happened to the item
    label: str = "item dead-lettered"


class ItemQuarantined(ItemDeadLettered):
    """Marker: the validation pipeline (``scrapy_scale.quality``) put the item in quarantine
    (a critical field missing, its JSON Schema failed). Like a dead letter, the item's
    request is recorded as failed (``parse_failed``, reason ``item quarantined: ...``), never
    done, so the page is replayed or crawled again once the spider is fixed."""

    label = "item quarantined"


class NoEgressError(IgnoreRequest, ScaleError):
    """A request that waited for an egress of the pool (``SCALE_EGRESSES``) and got none
    (none came back within the bound, or the spider closed): it fails, classed
    ``egress_failed`` (reason ``no egress``), rather than leave without one."""
