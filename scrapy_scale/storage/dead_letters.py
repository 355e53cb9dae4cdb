"""Dead letters of the store pipeline: the exceptions that drop an item, the stat suffix
of a reason, and the text of an item that any store accepts (also used by the quarantine)."""

from __future__ import annotations

import hashlib
import json
import reprlib
from dataclasses import dataclass
from typing import Any

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

from scrapy_scale.errors import ItemDeadLettered
from scrapy_scale.storage.backends.base import DeadRow
from scrapy_scale.storage.encode import encode_value


class DeadLetteredDrop(DropItem, ItemDeadLettered):
    """``DropItem`` for an item sent to the dead letter: its request counts as failed."""

    def __init__(self, message: str, reason: str, log_level: str | None = None):
        super().__init__(message, log_level)
        self.reason = reason


class NotAnItem(TypeError, ItemDeadLettered):
    """A callback yielded something that is not an item (dead-lettered; logged as an error)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def reason_kind(reason: str) -> str:
    """The stat suffix of a dead-letter reason: ``invalid key: ...`` -> ``invalid_key``;
    ``MongoDB refused the write (code 2): ...`` -> ``MongoDB_refused_the_write``."""
    head = reason.split(":", 1)[0].split("(", 1)[0].strip()
    return head.replace(" ", "_")[:40] or "other"


def clean_text(s: str | None) -> str | None:
    """A string any store accepts (lone surrogates escaped)."""
    if s is None:
        return None
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


#: bounded repr (depth, lengths) for dead letters: safe on cycles and deep nesting
SHORT_REPR = reprlib.Repr()
SHORT_REPR.maxlevel, SHORT_REPR.maxstring, SHORT_REPR.maxother = 8, 500, 500
SHORT_REPR.maxdict = SHORT_REPR.maxlist = 50


def item_text(item: Any, limit: int = 10_000) -> str:
    """The item for the dead letter, as text any store accepts: JSON of its fields
    (each encoded by the rules, else its repr), or the item's repr; at most ``limit`` chars."""
    try:
        if isinstance(item, dict) or ItemAdapter.is_item(item):
            out: dict[str, Any] = {}
            for k, v in ItemAdapter(item).items():
                try:
                    out[str(k)] = encode_value(v, str(k))
                except Exception:  # noqa: BLE001
                    out[str(k)] = SHORT_REPR.repr(v)
            text = json.dumps(out, ensure_ascii=True, default=repr)
        else:
            text = SHORT_REPR.repr(item)
    except Exception:  # noqa: BLE001
        text = f"<unrepresentable {type(item).__name__}>"
    text = text if len(text) <= limit else text[:limit] + "...(truncated)"
    return clean_text(text) or ""


@dataclass(frozen=True)
class ItemSource:
    """Where a dead-lettered item came from."""

    callback: str
    url: str | None
    index: int | None
    item_type: str


def dead_row(item: Any, reason: str, key: str | None, src: ItemSource, run_id: str, job: str) -> DeadRow:
    """The dead-letter record of ``item``: its id is stable for the same item from the same
    place and reason, so writing it again updates it."""
    body = {
        "key": key,
        "reason": clean_text(reason),
        "callback": clean_text(src.callback),
        "source_url": clean_text(src.url),
        "item_type": clean_text(src.item_type),
        "run_id": run_id,
        "job": job,
        "item": item_text(item),
    }
    ident = hashlib.sha1(json.dumps([key, src.url, src.index, src.item_type, reason]).encode()).hexdigest()
    return DeadRow(ident, body)
