"""Request.meta keys that scrapy-scale reads and writes. One place, so they stay consistent."""

#: attempts made so far for this request, 1 for the first download
ATTEMPT = "scale_attempt"
#: epoch seconds before which the request must not be downloaded (a retry's backoff)
NOT_BEFORE = "scale_not_before"
#: egress ids this request must not go through (after egress failures or blocks)
AVOID_EGRESS = "scale_avoid_egress"
#: the egress id the request went through (set by the egress pool, or by the user)
EGRESS = "scale_egress"
#: hex request fingerprint, cached at enqueue so later components agree on it
FINGERPRINT = "scale_fingerprint"
#: True when the callback is expected to yield at least one item
EXPECT_ITEMS = "scale_expect_items"
#: class and reason of the previous attempt's failure, for the next attempt's outcome
LAST_FAILURE = "scale_last_failure"

#: late retries (SCALE_RETRY_LATE) made so far in this request's chain
LATE = "scale_late"
#: epoch seconds of the chain's first failure (the late retries' deadline counts from it)
FIRST_FAILED = "scale_first_failed"

#: the keys that make a request the next attempt of its chain; a request that copied
#: them from another (``meta=dict(response.meta)``) starts a chain of its own without them
CHAIN_KEYS = (ATTEMPT, NOT_BEFORE, LAST_FAILURE, AVOID_EGRESS, LATE, FIRST_FAILED, "retry_times")
