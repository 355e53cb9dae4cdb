"""Records of what the testbed served: one per request, in arrival order."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class Served:
    """One request a target host received and what it answered.

    ``status`` is None when no HTTP answer was sent (kind ``reset`` or ``hang``).
    ``kind`` is ``ok`` for a normal answer, ``not_found`` for a path outside the
    catalog, ``robots`` for /robots.txt, ``rate_limited`` / ``banned`` for the
    per-client limit and banned egresses, else the name of the fault that fired.
    ``attempt`` is the ordinal of this request among all requests to (host, path).
    """

    time: float
    host: str
    path: str
    method: str
    egress: str | None
    client: str
    conn: int
    status: int | None
    kind: str
    attempt: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True, frozen=True)
class ProxyEvent:
    """One request (or CONNECT) a proxy received and what it did with it.

    ``outcome``: forwarded, tunnel, auth_required, reset, bad_gateway; held (``jitter``
    mode: received now, forwarded later).
    """

    time: float
    proxy: str
    method: str
    target: str
    client: str
    outcome: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
