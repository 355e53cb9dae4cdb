"""What the item store's settings and its backends agree on: the bookkeeping fields stored
next to an item's own, the store URL schemes, and where an ``sqlite:`` URL puts its file.
Plain Python; its own module so that the settings parser needs no backend and the
backends need no settings parser."""

from __future__ import annotations

from urllib.parse import urlsplit

#: names of the bookkeeping fields stored next to the item's own fields
META_FIELDS: dict[str, str] = {
    "first_seen": "_first_seen",
    "last_seen": "_last_seen",
    "run_id": "_run_id",
    "job": "_job",
    "source_url": "_source_url",
    "item_type": "_item_type",
}

SCHEMES = ("sqlite", "mongodb", "mongodb+srv")


def sqlite_path(url: str) -> str:
    """As the frontier reads its URL: ``sqlite:///abs/path`` (or ``sqlite:////abs/path``) is
    absolute, ``sqlite://rel/path`` relative to the working directory."""
    parts = urlsplit(url)
    path = (parts.netloc or "") + parts.path
    if path.startswith("//"):
        path = path[1:]
    if path in ("", "/"):
        raise ValueError(f"no file in {url!r}; use sqlite:///path/to/items.sqlite")
    return path
