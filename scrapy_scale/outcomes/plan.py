"""One plan per attempt: what the downloader middleware does with a classified attempt.

:meth:`scrapy_scale.outcomes.retry.RetryDecider.plan` takes the request and the
:class:`Attempt` (the classifier's verdict and what came back) and returns one
:class:`RetryPlan`; the middleware carries it out (counts its stats, writes its give-up
line, sends its outcome, returns its retry request) and asks nothing more. Plain data:
no Scrapy glue, so the policy is unit-tested with plans of outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.model import Outcome

if TYPE_CHECKING:
    from scrapy import Request


@dataclass(frozen=True, slots=True)
class Attempt:
    """One download attempt as the middleware saw it."""

    verdict: Verdict
    #: the response's status; None for a download exception
    status: int | None = None
    exception: BaseException | None = None
    latency: float | None = None
    #: Scrapy's own download (robots.txt, media: callback ``NO_CALLBACK``): the engine
    #: re-sends a returned request at once, and its outcomes are ``internal``
    internal: bool = False

    @property
    def answered(self) -> bool:
        return self.status is not None


class Step(Enum):
    #: nothing more to try: the attempt's outcome is final
    DONE = "done"
    #: the next attempt is sent at once (Scrapy's own downloads: the engine re-sends it)
    RETRY_NOW = "retry now"
    #: the next attempt is held until :attr:`RetryPlan.at`, through an egress other than
    #: those in :attr:`RetryPlan.avoid`
    RETRY_LATER = "retry later"
    #: a retryable class whose retries are spent or refused: final, with a give-up line at
    #: :attr:`RetryPlan.level` (None: no line)
    GIVE_UP = "give up"


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """The policy's whole answer about one attempt."""

    step: Step
    #: the attempt's outcome: non-final with ``retry_at`` and ``avoid_egress`` when retried,
    #: else final. None for a crawl response that is done: its final outcome is made after
    #: its callback (with the items, after the parse checks)
    outcome: Outcome | None = None
    #: the next attempt of the chain (a retry step)
    retry: Request | None = None
    #: epoch seconds before which the retry is not sent (a retry step)
    at: float | None = None
    #: egresses the retry must not go through
    avoid: tuple[str, ...] = ()
    #: why it was given up ("budget", "deadline", "broken_page", "dont_retry", "disabled",
    #: "not listed"): the final outcome's ``gave_up_why``
    why: str | None = None
    #: the give-up line's level (GIVE_UP of a crawl request; None: no line)
    level: int | None = None
    #: stats keys to count once each
    stats: tuple[str, ...] = ()

    @property
    def retried(self) -> bool:
        return self.retry is not None


#: a crawl response that is done: nothing to send before its callback ran
DONE = RetryPlan(Step.DONE)
