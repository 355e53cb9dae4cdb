"""Credentials out of URLs before they reach a log line, a stat, an error or a report.

One place for every component: ``redact_url`` for a URL (a store's, or a request's in
the outcome log), ``redact_text`` for a message that may contain URLs (a setting's bad
value, an error from a client library). There is no other copy: every URL the project
prints goes through :func:`redact_url`.

What is masked:

- the userinfo: ``user:pass@``, ``:pass@`` and ``user@`` become ``***@`` (so a reader
  sees there were credentials). The authority is read up to the first ``/``, so a
  password holding an unencoded ``#``, ``?`` or ``@`` is masked whole too;
- query values whose name looks secret (``password``, ``token``, ``secret``, ``*key*``,
  ``cred``...): ``?password=x`` -> ``?password=***``;
- inside any other query value, ``NAME:VALUE`` properties (MongoDB's
  ``authMechanismProperties=AWS_SESSION_TOKEN:...``) whose name looks secret.

The rest of the URL is kept byte for byte (no re-encoding), so a redacted request URL
still reads like the one on the wire.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

#: words that make a query parameter (or a property) name secret (redis-py reads ``?password=``)
SECRET_WORDS = ("pass", "secret", "token", "key", "cred")

MASK = "***"
#: longest value shown in a log line (a long JSON setting is cut)
MAX_VALUE_CHARS = 200

_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def is_secret(key: str) -> bool:
    return any(w in key.lower() for w in SECRET_WORDS)


def redact_url(url: str) -> str:
    """``url`` without credentials: the userinfo shown as ``***@``, secret-looking query
    values (and secret ``NAME:VALUE`` properties inside query values) as ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # no authority ("host:port", a path): drop anything up to an "@"
        return url.rpartition("@")[2]
    slash = rest.find("/")
    authority, tail = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in authority:
        authority = MASK + "@" + authority.rpartition("@")[2]
    # without a path, the query or fragment starts inside what came before the first "/"
    cut = min((i for i in (authority.find("?"), authority.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        authority, tail = authority[:cut], authority[cut:] + tail
    head, hash_, fragment = tail.partition("#")
    path, q, query = head.partition("?")
    if q:
        query = "&".join(_mask_pair(p) for p in query.split("&"))
    return f"{scheme}://{authority}{path}{q}{query}{hash_}{fragment}"


def _mask_pair(pair: str) -> str:
    name, eq, value = pair.partition("=")
    if not eq:
        return pair
    if is_secret(unquote_plus(name)):
        return f"{name}={MASK}"
    return f"{name}={_mask_properties(value)}"


def _mask_properties(value: str) -> str:
    """``A:x,TOKEN:y`` -> ``A:x,TOKEN:***`` (MongoDB ``authMechanismProperties``); other values as they are."""
    text = unquote_plus(value)
    if ":" not in text:
        return value
    props = [p.partition(":") for p in text.split(",")]
    if not any(colon and is_secret(k) for k, colon, _ in props):
        return value
    return ",".join(f"{k}:{MASK}" if colon and is_secret(k) else k + colon + v for k, colon, v in props)


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    return _URL_RE.sub(_redact_match, text)


def _redact_match(m: re.Match[str]) -> str:
    url = m.group()
    core = url.rstrip(").,;:")  # punctuation of the sentence around the URL stays outside it
    return redact_url(core) + url[len(core) :]


def redact_value(value: Any) -> str:
    """``repr(value)`` fit for a log line: URLs redacted, values under secret-looking keys
    of a dict masked, cut to a readable length."""
    if isinstance(value, Mapping):
        value = {k: MASK if isinstance(k, str) and is_secret(k) else v for k, v in value.items()}
    text = redact_text(repr(value))
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."
