"""How tests judge a pacing delay from the arrival times a test server logged.

The crawler keeps its delay between sends; the server logs arrivals. On a loaded machine one
arrival made late widens its gap and narrows the next by as much (CI, load about 25: gaps of
1.041 s then 0.965 s under a 1 s delay), so a bound on every single gap fails while the
crawler held its delay. What holds: any two arrivals k sends apart are at least k delays
apart, less one arrival's jitter, and the mean gap is the delay or more. Without the delay
the gaps are near 0 and both checks fail."""

from __future__ import annotations

#: how late one arrival may be on a loaded machine, in seconds
JITTER = 0.15


def spacing_problems(
    times: list[float], delay: float, *, jitter: float = JITTER, mean_share: float = 0.97
) -> list[str]:
    """What breaks a delay of ``delay`` seconds between the arrivals ``times`` (sorted); empty
    when it held. The mean gap may be 3% short of the delay (the testbed's clock reads); a
    test of a few arrivals, where one late arrival moves the mean by more, lowers
    ``mean_share`` and relies on the first and last being ``n - 1`` delays apart less jitter."""
    problems = []
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            if times[j] - times[i] < (j - i) * delay - jitter:
                problems.append(f"arrivals {i} and {j} are {times[j] - times[i]:.3f} s apart")
    if len(times) > 1 and (times[-1] - times[0]) / (len(times) - 1) < delay * mean_share:
        problems.append(f"mean gap {(times[-1] - times[0]) / (len(times) - 1):.3f} s")
    return problems[:5]
