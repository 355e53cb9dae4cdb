"""The synthetic catalog each testbed host serves, generated on the fly from the seed.

Nothing is stored: every page is a pure function of (seed, host number, path), so a
host with 1,000,000 detail pages costs no memory.

Layout of host number ``n`` with ``pages`` detail pages and ``per_page`` links per
listing page:

- ``/`` and ``/list/1`` .. ``/list/L``: listing pages (``L = ceil(pages / per_page)``),
  each linking to its detail pages (``a.item``) and to the next listing page
  (``a.next``, absent on the last one);
- ``/item/1`` .. ``/item/<pages>``: detail pages with ``h1.title``, ``span.sku`` and
  ``span.price``;
- ``/robots.txt``.
"""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any

ADJECTIVES = (
    "Red",
    "Blue",
    "Green",
    "Tiny",
    "Giant",
    "Smart",
    "Quiet",
    "Rapid",
    "Solid",
    "Bright",
    "Classic",
    "Modern",
    "Rustic",
    "Golden",
    "Silver",
    "Wooden",
    "Steel",
    "Soft",
    "Heavy",
    "Light",
)
NOUNS = (
    "Lamp",
    "Chair",
    "Kettle",
    "Backpack",
    "Notebook",
    "Speaker",
    "Blanket",
    "Bottle",
    "Clock",
    "Drill",
    "Helmet",
    "Jacket",
    "Keyboard",
    "Mug",
    "Pillow",
    "Router",
    "Scarf",
    "Teapot",
    "Umbrella",
    "Wallet",
)

ITEM_RE = re.compile(r"^/item/(\d+)$")
LIST_RE = re.compile(r"^/list/(\d+)$")


def digest(*parts: object) -> int:
    """A stable 64-bit number from the parts (same on every machine and Python run)."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big")


def unit(*parts: object) -> float:
    """A stable number in [0, 1) from the parts."""
    return digest(*parts) / 2**64


class Catalog:
    """Pages of one testbed (all hosts share the shape, contents differ per host and seed)."""

    def __init__(self, seed: int, pages: int, per_page: int = 20):
        if pages < 1 or per_page < 1:
            raise ValueError("pages and per_page must be >= 1")
        self.seed = seed
        self.pages = pages
        self.per_page = per_page
        self.list_pages = -(-pages // per_page)

    # ---- data -------------------------------------------------------------------

    def item_data(self, host_no: int, item_id: int) -> dict[str, Any]:
        """sku, title and price of one detail page."""
        d = digest(self.seed, host_no, item_id)
        title = f"{ADJECTIVES[d % len(ADJECTIVES)]} {NOUNS[(d >> 8) % len(NOUNS)]} {item_id}"
        price = round(1 + ((d >> 16) % 99_900) / 100, 2)
        sku = f"S{host_no:03d}-{item_id:07d}-{(d >> 40) % 4096:03x}"
        return {"sku": sku, "title": title, "price": price}

    def item_id(self, path: str) -> int | None:
        m = ITEM_RE.match(path)
        if not m:
            return None
        i = int(m.group(1))
        return i if 1 <= i <= self.pages else None

    def list_no(self, path: str) -> int | None:
        if path == "/":
            return 1
        m = LIST_RE.match(path)
        if not m:
            return None
        k = int(m.group(1))
        return k if 1 <= k <= self.list_pages else None

    # ---- pages ------------------------------------------------------------------

    def listing_html(self, host_no: int, k: int) -> bytes:
        first = (k - 1) * self.per_page + 1
        last = min(self.pages, k * self.per_page)
        links = "".join(
            f'<li><a class="item" href="/item/{i}">{html.escape(self.item_data(host_no, i)["title"])}</a></li>'
            for i in range(first, last + 1)
        )
        nxt = f'<a class="next" href="/list/{k + 1}">next</a>' if k < self.list_pages else ""
        return (
            f"<!DOCTYPE html><html><head><title>Catalog page {k}</title></head><body>"
            f'<h1>Catalog page {k} of {self.list_pages}</h1><ul class="items">{links}</ul>'
            f'<nav class="pager">{nxt}</nav></body></html>'
        ).encode()

    def item_html(self, host_no: int, item_id: int, variant: str | None = None) -> bytes:
        """A detail page; ``variant`` is a layout change: "renamed" or "missing"."""
        data = self.item_data(host_no, item_id)
        title = html.escape(data["title"])
        price = f"{data['price']:.2f}"
        if variant == "renamed":
            body = (
                f'<h1 class="name">{title}</h1><span class="product-code">{data["sku"]}</span>'
                f'<span class="cost">{price}</span>'
            )
        elif variant == "missing":
            body = f'<h1 class="title">{title}</h1><span class="sku">{data["sku"]}</span>'
        else:
            body = (
                f'<h1 class="title">{title}</h1><span class="sku">{data["sku"]}</span>'
                f'<span class="price">{price}</span>'
            )
        back = (item_id - 1) // self.per_page + 1
        return (
            f"<!DOCTYPE html><html><head><title>{title}</title></head><body>"
            f'<div class="product">{body}</div><a class="back" href="/list/{back}">back</a>'
            "</body></html>"
        ).encode()


BLOCK_PAGE = (
    b"<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>"
    b'<div id="challenge-form" class="challenge">Checking your browser before accessing '
    b"this site. Please enable JavaScript and cookies.</div></body></html>"
)


def robots_txt(disallow: list[str], crawl_delay: float | None = None) -> bytes:
    lines = ["User-agent: *"]
    lines += [f"Disallow: {p}" for p in disallow] or ["Allow: /"]
    if crawl_delay is not None:
        lines.append(f"Crawl-delay: {crawl_delay:g}")
    return ("\n".join(lines) + "\n").encode()
