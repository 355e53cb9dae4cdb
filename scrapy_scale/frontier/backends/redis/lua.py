"""The frontier's Lua scripts, shipped as package data (``scrapy_scale/frontier/backends/redis/lua/*.lua``).

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
    return files("scrapy_scale.frontier.backends.redis").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


#: the scripts the store registers: name -> (prelude file or None, script file)
SCRIPTS: dict[str, tuple[str | None, str]] = {
    "enqueue": ("prelude", "enqueue"),
    "seed": ("prelude", "seed"),
    "lease": ("prelude", "lease"),
    "renew": ("prelude", "renew"),
    "finish": ("prelude", "finish"),
    "release": ("prelude", "release"),
    "dead": ("prelude", "dead"),
    "requeue": ("prelude", "requeue"),
    "resolve": ("prelude", "resolve"),
    # status reads (status.py): counters, dead letters, unexpired leases per worker and the
    # domains per priority; the oldest eligible time among the ready heads of a chunk of domains
    "status": ("status_prelude", "status_summary"),
    "heads": ("status_prelude", "status_heads"),
    "run": (None, "run"),
    "claim": (None, "claim"),
    "counts": (None, "counts"),
    "feed": (None, "feed"),
}


def _text(name: str) -> str:
    pre, body = SCRIPTS[name]
    return (source(pre) if pre else "") + source(body)


#: the text of each script, read at import
TEXTS: dict[str, str] = {name: _text(name) for name in SCRIPTS}


def script(name: str) -> str:
    """The text of the script the store registers as ``name``."""
    return TEXTS[name]
