"""Exceptions that cross package boundaries (so no package imports another's internals)."""


class ItemNotStored(Exception):
    """An item pipeline could not store the item (the store broke, or the crawl shut down
    during an outage). Sent with Scrapy's ``item_error``: the frontier must not ack the
    item's request, so a resumed crawl fetches it again."""
