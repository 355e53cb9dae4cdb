"""The frontier's Lua scripts, shipped as package data (``scrapy_scale/frontier/lua/*.lua``).

Each script is read once, at import, and registered with Redis by the store
(``register_script``: EVALSHA, loaded once per connection). Keeping them in .lua files
lets an editor, a linter and a reader see them as Lua.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return files("scrapy_scale.frontier").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
