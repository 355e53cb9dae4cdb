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


#: the shared functions of the scripts that change records, and of the status reads
WRITE = ("queue_entry", "prelude")
READ = ("queue_entry", "status_prelude")
#: the scripts the store registers: name -> the files it is made of, in order (the shared
#: functions first)
SCRIPTS: dict[str, tuple[str, ...]] = {
    **{name: (*WRITE, name) for name in ("enqueue", "seed", "lease", "renew", "finish", "release")},
    **{name: (*WRITE, name) for name in ("dead", "requeue", "resolve", "isdone")},
    # status reads (status.py): counters, dead letters, unexpired leases per worker and the
    # domains per priority; the oldest eligible time among the ready records of a chunk of domains
    "status": (*READ, "status_summary"),
    "heads": (*READ, "status_heads"),
    **{name: (name,) for name in ("run", "claim", "counts", "feed")},
}


def _text(name: str) -> str:
    # every script starts with the slot guard: nothing runs on a slot that is moving
    return "".join(source(part) for part in ("guard", *SCRIPTS[name]))


#: the text of each script, read at import
TEXTS: dict[str, str] = {name: _text(name) for name in SCRIPTS}


def script(name: str) -> str:
    """The text of the script the store registers as ``name``."""
    return TEXTS[name]
