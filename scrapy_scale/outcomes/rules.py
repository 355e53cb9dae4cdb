"""Classification rules (``SCALE_FAILURE_RULES``): their form, parsing and matching.

A rule is a dict::

    {"class": "blocked",                    # required, one of FailureClass
     "reason": "captcha",                   # optional, short and of bounded variety
     "status": [403, "5xx", "520-530"],     # response rule: status codes / ranges
     "exception": "pkg.mod.SomeError",      # exception rule: dotted path(s), isinstance
     "css": "form#captcha",                 # response predicates (any of css/xpath/regex;
     "xpath": "//title[contains(., 'Denied')]",  #  all given ones must match)
     "regex": "(?i)access denied",
     "domain": ["example.com"],             # host or any subdomain of it
     "proxy": True,                         # only when the request went through a proxy
     "retry_after": True}                   # only when the response has Retry-After

A rule must name at least one of status, exception, css, xpath, regex; an
exception rule cannot have response conditions. Bad rules fail at startup
(:func:`parse_rules` raises ``ValueError``, the settings layer names
``SCALE_FAILURE_RULES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from scrapy_scale.outcomes.model import FailureClass

if TYPE_CHECKING:
    from scrapy.http import Response

C = FailureClass

_RULE_KEYS = {
    "class",
    "reason",
    "status",
    "exception",
    "css",
    "xpath",
    "regex",
    "domain",
    "proxy",
    "retry_after",
}
_RESPONSE_KEYS = {"status", "css", "xpath", "regex", "retry_after"}


@dataclass(frozen=True)
class Rule:
    cls: FailureClass
    reason: str
    statuses: frozenset[int] | None = None
    exceptions: tuple[type[BaseException], ...] | None = None
    domains: tuple[str, ...] | None = None
    proxy: bool | None = None
    retry_after: bool | None = None
    css: str | None = None
    xpath: Any = None  # compiled lxml XPath (from css or xpath)
    xpath_src: str | None = None
    regex: re.Pattern[str] | None = None

    @property
    def has_predicate(self) -> bool:
        return self.xpath is not None or self.regex is not None

    def matches_request(self, host: str, via_proxy: bool) -> bool:
        if self.proxy is not None and self.proxy != via_proxy:
            return False
        if self.domains is not None and not domain_matches(host, self.domains):
            return False
        return True

    def matches_response(self, response: Response, host: str, via_proxy: bool) -> bool:
        if self.exceptions is not None:
            return False
        if self.statuses is not None and response.status not in self.statuses:
            return False
        if not self.matches_request(host, via_proxy):
            return False
        if self.retry_after is not None and (b"Retry-After" in response.headers) != self.retry_after:
            return False
        if self.has_predicate:
            return self._predicate(response)
        return True

    def _predicate(self, response: Response) -> bool:
        text = getattr(response, "text", None) if hasattr(response, "selector") else None
        if text is None:  # binary response: no page to look at
            return False
        if self.regex is not None and not self.regex.search(text):
            return False
        if self.xpath is not None:
            try:
                found = self.xpath(response.selector.root)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - an unparsable page is not a match
                return False
            if not found:
                return False
        return True

    def matches_exception(self, exc: BaseException, host: str, via_proxy: bool) -> bool:
        return (
            self.exceptions is not None and isinstance(exc, self.exceptions) and self.matches_request(host, via_proxy)
        )


def domain_matches(host: str, domains: Iterable[str]) -> bool:
    for d in domains:
        if host == d or host.endswith("." + d):
            return True
    return False


# ---- rule parsing -------------------------------------------------------------

_RANGE = re.compile(r"^([1-5])xx$", re.I)
_SPAN = re.compile(r"^(\d{3})\s*-\s*(\d{3})$")


def _statuses(v: Any) -> frozenset[int]:
    items = v if isinstance(v, list | tuple | set | frozenset) else [v]
    out: set[int] = set()
    for x in items:
        if isinstance(x, bool):
            raise ValueError(f"bad status {x!r}")
        if isinstance(x, int):
            if not 100 <= x <= 599:
                raise ValueError(f"status {x} is not an HTTP status (100-599)")
            out.add(x)
            continue
        s = str(x).strip()
        if s.isdigit():
            out |= _statuses(int(s))
        elif m := _RANGE.match(s):
            base = int(m.group(1)) * 100
            out |= set(range(base, base + 100))
        elif m := _SPAN.match(s):
            lo, hi = int(m.group(1)), int(m.group(2))
            if not 100 <= lo <= hi <= 599:
                raise ValueError(f"bad status range {s!r}")
            out |= set(range(lo, hi + 1))
        else:
            raise ValueError(f'bad status {x!r} (use 404, "4xx" or "500-504")')
    if not out:
        raise ValueError("empty status list")
    return frozenset(out)


def _exceptions(v: Any) -> tuple[type[BaseException], ...]:
    items = v if isinstance(v, list | tuple) else [v]
    out = []
    for x in items:
        obj = x
        if isinstance(x, str):
            try:
                obj = load_object(x)
            except (ImportError, ValueError, AttributeError, NameError) as e:
                raise ValueError(f"cannot import exception {x!r}: {e}") from None
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise ValueError(f"{x!r} is not an exception class")
        out.append(obj)
    if not out:
        raise ValueError("empty exception list")
    return tuple(out)


def _domains(v: Any) -> tuple[str, ...]:
    items = v if isinstance(v, list | tuple | set) else [v]
    out = []
    for d in items:
        if not isinstance(d, str) or not d.strip() or "/" in d:
            raise ValueError(f"bad domain {d!r} (a host name such as example.com)")
        out.append(d.strip().lower().lstrip(".").removeprefix("*."))
    return tuple(out)


def _compile_xpath(expr: str, what: str) -> Any:
    from lxml import etree

    try:
        return etree.XPath(expr)
    except etree.XPathSyntaxError as e:
        raise ValueError(f"bad {what} {expr!r}: {e}") from None


def _css_to_xpath(sel: str) -> str:
    from cssselect import SelectorError
    from parsel.csstranslator import HTMLTranslator

    try:
        return HTMLTranslator().css_to_xpath(sel)
    except SelectorError as e:
        raise ValueError(f"bad css {sel!r}: {e}") from None


def reject_unknown_keys(where: str, given: Iterable[str], known: Iterable[str]) -> None:
    unknown = set(given) - set(known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")


def parse_rule(raw: Any, index: int = 0) -> Rule:
    """One rule from its dict form; ``ValueError`` says what is wrong."""
    where = f"rule {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a dict, got {type(raw).__name__}")
    reject_unknown_keys(where, raw, _RULE_KEYS)
    if "class" not in raw:
        raise ValueError(f"{where}: missing 'class'")
    try:
        cls = FailureClass.parse(str(raw["class"]))
        if not ({"status", "exception", "css", "xpath", "regex"} & set(raw)):
            raise ValueError("needs at least one of status, exception, css, xpath, regex")
        if "exception" in raw and _RESPONSE_KEYS & set(raw):
            raise ValueError("an exception rule cannot also have " + ", ".join(sorted(_RESPONSE_KEYS & set(raw))))
        reason = raw.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ValueError("'reason' must be a string")
        for key in ("proxy", "retry_after"):
            if key in raw and not isinstance(raw[key], bool):
                raise ValueError(f"'{key}' must be True or False")
        xpath = None
        xpath_src = None
        if "css" in raw and "xpath" in raw:
            raise ValueError("give css or xpath, not both")
        if "css" in raw:
            if not isinstance(raw["css"], str):
                raise ValueError("'css' must be a string")
            xpath_src = _css_to_xpath(raw["css"])
            xpath = _compile_xpath(xpath_src, "css")
        elif "xpath" in raw:
            if not isinstance(raw["xpath"], str):
                raise ValueError("'xpath' must be a string")
            xpath_src = raw["xpath"]
            xpath = _compile_xpath(xpath_src, "xpath")
        regex = None
        if "regex" in raw:
            if not isinstance(raw["regex"], str):
                raise ValueError("'regex' must be a string")
            try:
                regex = re.compile(raw["regex"])
            except re.error as e:
                raise ValueError(f"bad regex {raw['regex']!r}: {e}") from None
        rule = Rule(
            cls=cls,
            reason=reason or _default_reason(raw, index),
            statuses=_statuses(raw["status"]) if "status" in raw else None,
            exceptions=_exceptions(raw["exception"]) if "exception" in raw else None,
            domains=_domains(raw["domain"]) if "domain" in raw else None,
            proxy=raw.get("proxy"),
            retry_after=raw.get("retry_after"),
            css=raw.get("css"),
            xpath=xpath,
            xpath_src=xpath_src,
            regex=regex,
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return rule


def _default_reason(raw: dict[str, Any], index: int) -> str:
    for key in ("css", "xpath", "regex"):
        if key in raw:
            return f"rule {index}: {key} {str(raw[key])[:40]}"
    if "exception" in raw:
        return f"rule {index}: exception"
    return f"rule {index}: status"


def parse_rules(value: Any) -> list[Rule]:
    """Validate ``SCALE_FAILURE_RULES`` (a list of rule dicts, or its JSON)."""
    from scrapy_scale.config import as_json_value

    v = as_json_value(value)
    if isinstance(v, dict):
        v = [v]
    if not isinstance(v, list | tuple):
        raise ValueError("expected a list of rule dicts")
    return [r if isinstance(r, Rule) else parse_rule(r, i) for i, r in enumerate(v)]
