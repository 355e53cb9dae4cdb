"""Items into submissions for the batch writer: each item's key
(:class:`~scrapy_scale.storage.keys.KeyRules`), its document encoded with the run's
fields, or a dead letter saying why it cannot be stored (not an item, an invalid key,
unencodable, too large); and the keys of this run, for the duplicate count.

Plain Python: :class:`Submissions` owns the keys seen; the pipeline hands it items.
"""

from __future__ import annotations

from typing import Any

from itemadapter import ItemAdapter
from scrapy.utils.python import global_object_name

from scrapy_scale import compat
from scrapy_scale import stats_keys as K
from scrapy_scale.storage.backends import DeadRow, Row
from scrapy_scale.storage.dead_letters import ItemSource, dead_row
from scrapy_scale.storage.encode import Unencodable, encode_item, to_json
from scrapy_scale.storage.keys import InvalidKey, KeyRules
from scrapy_scale.storage.sources import Source
from scrapy_scale.storage.writer import Submission


class Submissions:
    def __init__(self, keys: KeyRules, fields: dict[str, str], max_item_bytes: int, drop_duplicates: bool, stats: Any):
        self.keys = keys
        self.fields = fields
        self.reserved = set(fields.values())
        self.max_item_bytes = max_item_bytes
        self.drop_duplicates = drop_duplicates
        self.stats = stats
        self.job = ""
        self.run_id = ""
        #: keys written (or on their way) in this run, for the duplicate count
        self._seen: set[str] = set()
        #: items whose key was already written in this run (scale/store/duplicates_in_run)
        self.duplicates_in_run = 0

    def opened(self, job: str, run_id: str) -> None:
        self.job, self.run_id = job, run_id

    @property
    def keys_in_run(self) -> int:
        return len(self._seen)

    def of(self, item: Any, src: Source | None) -> Submission | None:
        """The submission of ``item`` (its source ``src``): a keyed row, or a dead letter
        with why; None for a duplicate of this run dropped (SCALE_STORE_DROP_DUPLICATES)."""
        url = src.url if src else None
        cb = src.callback if src else "unknown callback"
        type_name = type(item).__name__
        meta = {
            self.fields["run_id"]: self.run_id,
            self.fields["job"]: self.job,
            self.fields["source_url"]: url,
            self.fields["item_type"]: type_name,
        }

        def dead(reason: str, key: str | None = None, doc: Any = None) -> DeadRow:
            where = ItemSource(cb, url, src.index if src else None, type_name)
            return dead_row(item if doc is None else doc, reason, key, where, self.run_id, self.job)

        def dead_sub(reason: str, key: str | None = None, doc: Any = None) -> Submission:
            return Submission(dead=dead(reason, key, doc), reason=reason)

        if not ItemAdapter.is_item(item):
            reason = (
                f"not an item: {cb} yielded a {global_object_name(type(item))} "
                "(expected a dict, scrapy.Item, dataclass or attrs object)"
            )
            return dead_sub(reason)
        # shallow: asdict() would recurse into nested items (forever, for an item holding a cycle)
        fields = dict(ItemAdapter(item).items())
        try:
            key = self.keys.key(type_name, fields, url, src.index if src else 0)
        except InvalidKey as e:
            return dead_sub(f"invalid key: {e}")
        try:
            doc = encode_item(fields, self.reserved)
            size = len(to_json(doc).encode("utf-8"))
        except Unencodable as e:
            return dead_sub(f"unencodable: {e}", key)
        except (UnicodeEncodeError, ValueError, RecursionError) as e:
            return dead_sub(f"unencodable: {type(e).__name__}: {str(e)[:200]}", key)
        if size > self.max_item_bytes:
            return dead_sub(f"too large: {size} bytes > SCALE_STORE_MAX_ITEM_BYTES={self.max_item_bytes}", key)
        if key in self._seen:
            self.stats.inc_value(K.STORE_DUPLICATES_IN_RUN)
            self.duplicates_in_run += 1
            if self.drop_duplicates:
                return None
        else:
            self._seen.add(key)
        doc.update(meta)
        return Submission(
            row=Row(key, doc),
            on_refused=lambda reason: dead(reason, key, doc),
            item_class=None if type(item) is dict else compat.qualified_name(type(item)),
        )
