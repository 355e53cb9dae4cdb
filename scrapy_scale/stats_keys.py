"""Stats keys: the ``scale/...`` names other tools read (dashboards, Spidermon, the summary).

One module, so a key is spelled once; the README and docs/*.md list them for users.
Keys with a variable part are functions.
"""

from __future__ import annotations

# ---- outcomes (counted by scrapy_scale.outcomes.stats.OutcomeStats, a subscriber) ----
OUTCOME = "scale/outcome/"  # + class: final outcomes, one per request chain
RETRY = "scale/retry/"  # + class: retries scheduled (non-final outcomes)
GAVE_UP = "scale/gave_up/"  # + class: chains of a retryable class not retried further
RETRY_DEPTH = "scale/retry_depth/"  # + n: finished chains that took n attempts
INTERNAL = "scale/internal/"  # + class: outcomes of Scrapy's own downloads (robots.txt, media)
RETRY_INTERNAL = "scale/retry_internal/"  # + class: immediate retries of those
FALLBACK = "scale/outcome_fallback"  # requests that ended outside the outcome middlewares
PARSE_FAILED = "scale/parse_failed/"  # + kind: callback_error, no_items, missing_fields
ERROR_GROUP = "scale/error_group/"  # + class/reason: the largest groups, at close
RETRY_HELD = "scale/retry/held"
RETRY_ABANDONED = "scale/retry/abandoned"
RETRY_NOT_BEFORE_GUARD = "scale/retry/not_before_guard"
WARNED = "scale/"  # + the kind of a counted warning: retry_after_negative, retry_after_huge
RETRY_LATE = "scale/retry/late"  # late retries scheduled (SCALE_RETRY_LATE: after the quick budget)
RETRY_BROKEN_PAGE = (
    "scale/retry/broken_page"  # pages given up after their quick retries: their site answers well (outcomes/noise.py)
)
RETRY_CALM = "scale/retry/calm"  # quick retries sooner: their site answers well otherwise (outcomes/noise.py)
# transient attempts with no answer through an egress that had not proved itself, retried as
# the egress's failure (at once, through another egress, in the egress_failed budget)
RETRY_AS_EGRESS_FAILURE = "scale/retry/as_egress_failure"
RETRY_LATE_BAD_META = "scale/retry/late_bad_meta"  # a stored request's late-retry meta that was not valid

# Scrapy's own RetryMiddleware keys, written too (existing dashboards and monitors read them)
SCRAPY_RETRY_COUNT = "retry/count"
SCRAPY_RETRY_MAX_REACHED = "retry/max_reached"
SCRAPY_RETRY_REASON = "retry/reason_count/"  # + reason, as Scrapy names it

# Scrapy's own scheduler keys, written by the frontier scheduler as Scrapy's scheduler does
SCRAPY_SCHEDULER_ENQUEUED = "scheduler/enqueued"
SCRAPY_SCHEDULER_ENQUEUED_IN = "scheduler/enqueued/"  # + memory, disk
SCRAPY_SCHEDULER_DEQUEUED = "scheduler/dequeued"
SCRAPY_SCHEDULER_DEQUEUED_FROM = "scheduler/dequeued/"  # + memory, disk
SCRAPY_SCHEDULER_UNSERIALIZABLE = "scheduler/unserializable"

# Scrapy's own keys that the run summary and the quality report read (or write)
SCRAPY_FINISH_REASON = "finish_reason"
SCRAPY_ELAPSED = "elapsed_time_seconds"
SCRAPY_RESPONSES = "downloader/response_count"
SCRAPY_RESPONSES_RECEIVED = "response_received_count"
SCRAPY_DOWNLOAD_EXCEPTIONS = "downloader/exception_count"
SCRAPY_ITEMS_SCRAPED = "item_scraped_count"
SCRAPY_ERRORS_LOGGED = "log_count/ERROR"

# ---- frontier ----
FRONTIER_STATE = "scale/frontier/state/"  # + pending, delayed, leased, done, failed
FRONTIER_RUN = "scale/frontier/run"
FRONTIER_WORKER = "scale/frontier/worker"
FRONTIER_ENQUEUED = "scale/frontier/enqueued"  # requests the store took as new (or reopened)
FRONTIER_UPDATED = "scale/frontier/updated"  # retries and redirects that updated their record
FRONTIER_DEDUPLICATED = "scale/frontier/deduplicated"  # requests the store already had
# of those, the ones this worker knew the store had (no store call: frontier/scheduling/known.py)
FRONTIER_DEDUPLICATED_IN_WORKER = "scale/frontier/deduplicated_in_worker"
FRONTIER_DELAYED = "scale/frontier/delayed"  # requests enqueued with a not-before time
FRONTIER_LEASED = "scale/frontier/leased"
FRONTIER_ACKED = "scale/frontier/acked"
FRONTIER_FAILED = "scale/frontier/failed"
FRONTIER_STALE_ACKS = "scale/frontier/stale_acks"  # acks/failures/retries refused: the lease had passed on
FRONTIER_ACKED_WITHOUT_OUTCOME = "scale/frontier/acked_without_outcome"
FRONTIER_OVERDUE = "scale/frontier/overdue"  # requests in flight longer than DOWNLOAD_TIMEOUT + 60 s
FRONTIER_RECLAIMED = "scale/frontier/reclaimed"
FRONTIER_RELEASED = "scale/frontier/released"
FRONTIER_DEAD_LETTERED = "scale/frontier/dead_lettered"  # records this worker could not read
FRONTIER_DEAD_LETTERS = "scale/frontier/dead_letters"  # the run's dead letters, job-wide (at close)
FRONTIER_UNSERIALIZABLE = "scale/frontier/unserializable"  # requests kept in memory only
FRONTIER_UNSERIALIZABLE_TYPE = "scale/frontier/unserializable/"  # + the type that could not be stored
FRONTIER_FEED_REFUSED = "scale/frontier/feed_refused"
FRONTIER_OUTBOX_FLUSHES = "scale/frontier/outbox_flushes"
#: flushes on the reactor thread left to the store thread's rounds (the store would have waited)
FRONTIER_OUTBOX_FLUSHES_DEFERRED = "scale/frontier/outbox_flushes_deferred"
FRONTIER_SYNCS = "scale/frontier/syncs"
FRONTIER_SYNC_SECONDS = "scale/frontier/sync_seconds"
FRONTIER_SYNC_ERRORS = "scale/frontier/sync_errors"
FRONTIER_ERROR = "scale/frontier/error"  # why the frontier stopped the crawl
FRONTIER_WAIT_AVG = "scale/frontier/wait_seconds_avg"  # eligible -> leased, on average
FRONTIER_QUEUE_LENGTH = "scale/frontier/queue_length"  # pending + delayed, job-wide

# ---- throttle (scrapy_scale.throttle.Throttle) ----
THROTTLE_SITE = "scale/throttle/site/"  # + site/field: the top sites (SCALE_THROTTLE_STATS_TOP) and "other"
THROTTLE_OTHER = "other"  # the site name under which the sites past the top are summed
THROTTLE_SITES = "scale/throttle/sites"  # sites paced
THROTTLE_RATE_LIMITED = "scale/throttle/rate_limited"  # rate-limited answers seen
THROTTLE_PAUSED_SECONDS = "scale/throttle/paused_seconds"  # seconds of Retry-After pauses, all sites
THROTTLE_SHARED_ERRORS = "scale/throttle/shared_errors"  # failed calls to the shared limiter
THROTTLE_WAIT_CAPPED = "scale/throttle/wait_capped"  # waits from shared state cut to the cap
THROTTLE_GRANTS_LATE = "scale/throttle/grants_late"  # shared grants used by the pass they woke, past their TTL
THROTTLE_LEARNED_REJECTED = "scale/throttle/learned_rejected"  # learned state read back unusable or repaired
THROTTLE_ROUTES = "scale/throttle/routes"  # routes (site via egress) paced on their own learned capacity
THROTTLE_ROUTE_BEATS = "scale/throttle/route_beats"  # refusals that stepped on a bucket's beat
THROTTLE_BLOCKED_WAITS = "scale/throttle/blocked_waits"  # sites made to wait: blocked on every route
FRONTIER_DEFERRED = "scale/frontier/deferred"  # held requests given back to the store until their turn

# ---- store ----
STORE_BATCHES = "scale/store/batches"  # batches written
STORE_WRITTEN = "scale/store/written"  # items written (inserted + updated)
STORE_INSERTED = "scale/store/inserted"  # items whose key was new
STORE_UPDATED = "scale/store/updated"  # items whose key already existed (earlier run, retry, duplicate)
STORE_DEAD_LETTERED = "scale/store/dead_lettered"  # items sent to the dead letter
STORE_DEAD_LETTER_REASON = "scale/store/dead_letter_reason/"  # + reason kind
STORE_RETRIES = "scale/store/retries"  # attempts that failed because the store was unavailable
STORE_WRITE_SECONDS = "scale/store/write_seconds"  # time spent writing, all batches
STORE_WRITE_LATENCY_MAX = "scale/store/write_latency_max"  # the slowest batch write (s)
STORE_ITEM_LATENCY_MAX = "scale/store/item_latency_max"  # longest wait, pipeline to committed (s)
STORE_ITEM_LATENCY_AVG = "scale/store/item_latency_avg"  # average of that wait (per batch)
STORE_KEYS_IN_RUN = "scale/store/keys_in_run"  # distinct item keys written this run
STORE_DUPLICATES_IN_RUN = "scale/store/duplicates_in_run"  # items whose key this run already wrote
STORE_PAUSES = "scale/store/pauses"  # times the crawl was paused because the store fell behind
STORE_FAILED = "scale/store/failed"  # why the store (or the feed journal) could not be written
STORE_ABANDONED = "scale/store/abandoned"  # items not stored: shut down during an outage
STORE_FEED_RESENT = "scale/store/feed_resent"  # items of a crashed run re-sent to this run's feeds
STORE_FEED_KEPT_RESENT = "scale/store/feed_kept_resent"  # crawled again, not written again: re-sent already

# ---- egress pool (scrapy_scale.egress) ----
EGRESS_REQUESTS = "scale/egress/requests"  # requests given an egress
EGRESS_EVICTIONS = "scale/egress/evictions"  # egresses quarantined globally (re-quarantines too)
EGRESS_EVICTIONS_DOMAIN = "scale/egress/evictions_domain"  # (egress, domain) quarantines
EGRESS_REPROBES = "scale/egress/reprobes"  # half-open probe requests sent
EGRESS_REPROBES_SPARED = "scale/egress/reprobes_spared_retry"  # retries kept off a re-probe
#: requests to a one-slot site (Crawl-delay) kept off a re-probe or an unproven egress
EGRESS_ONE_SLOT_SPARED = "scale/egress/one_slot_spared"
#: times a route at the pace a page was just refused at was held for that page's retry
#: (the learned route gate, scrapy_scale/throttle/routing.py RouteLearner.crowded)
EGRESS_REFUSED_RETRY_HOLDS = "scale/egress/refused_retry_holds"
#: retries of pages refused for the rate (meta scale_refused_via) the pool gave an egress
EGRESS_REFUSED_RETRIES = "scale/egress/refused_retries"
EGRESS_RESTORED = "scale/egress/restored"  # re-probes that restored an egress
EGRESS_GROUPS_RETIRED = "scale/egress/groups_retired"
EGRESS_POOL_SIZE = "scale/egress/pool_size"  # egresses in the pool after a source refresh
EGRESS_POOL = "scale/egress/pool/"  # + healthy, quarantined, probing: egresses per state (at each sync)
EGRESS_WAITED_IN_PLACE = "scale/egress/waited_in_place"  # naps of requests that wait for an egress where they are (Scrapy's own downloads: robots.txt)
EGRESS_WAIT = "scale/egress/wait/"  # + quarantined, route_cap, probing, empty, avoided (a retry waits for an egress it does not avoid): requests held, by why
EGRESS_BY = "scale/egress/by/"  # + id/requests, id/failed/CLASS, at close, top N ids + other
EGRESS_BROWSER_CONTEXTS = "scale/egress/browser/contexts"  # live egress contexts (gauge; 0 after close)
EGRESS_BROWSER_CONTEXTS_MAX = "scale/egress/browser/contexts_max"  # most live at once (seen at syncs)
EGRESS_BROWSER_PROCESSES = "scale/egress/browser/processes"  # connected browser processes (gauge)
EGRESS_BROWSER_FAILED_STARTS = "scale/egress/browser/failed_starts"  # contexts that could not start
EGRESS_STATE_SKIPPED = "scale/egress/state_skipped/"  # + bad_record, clamped, live: bad shared state read (times)
EGRESS_SLOW_BODIES = (
    "scale/egress/slow_bodies"  # answers whose body came far slower through an egress than the site's through others
)
EGRESS_SUSPECT = (
    "scale/egress/suspect_failures"  # attempts through an egress that failed after the connection or got a 5xx
)
EGRESS_SUSPECT_BLAMED = "scale/egress/suspect_blamed"  # such failures counted against the egress (evidence)
EGRESS_FIRST_BYTE_TIMEOUTS = "scale/egress/first_byte_timeouts"  # attempts cancelled: no headers in time
# of those, through an egress not proven yet, under its site's shorter bound (egress/header_times.py)
EGRESS_FIRST_BYTE_TIMEOUTS_UNPROVEN = "scale/egress/first_byte_timeouts_unproven"
EGRESS_ROUTE_CAPPED = "scale/egress/route_capped/"  # + id/domain: times a route was at its cap (top N)

# ---- quality (scrapy_scale.quality: the validation pipeline and the report extension) ----
QUALITY_VALIDATED = "scale/quality/validated"  # items checked
QUALITY_QUARANTINED = "scale/quality/quarantined"  # items put in quarantine
QUALITY_INVALID_RATE = "scale/quality/invalid_rate"  # quarantined / validated, at close
QUALITY_INVALID = "scale/quality/invalid/"  # + reason kind: missing/<field>, schema
QUALITY_MISSING = "scale/quality/missing/"  # + critical field (Type.field for per-type fields)
QUALITY_DUPLICATES_CONTENT = "scale/quality/duplicates_in_run/content"
QUALITY_REPORT_OK = "scale/quality/report/ok"  # 1 when every check passed, else 0
QUALITY_CHECKS_FAILED = "scale/quality/report/failed"  # how many checks failed
QUALITY_CHECK_FAILED = "scale/quality/check_failed/"  # + check name (items_per_request:parse_item, ...)
QUALITY_BATCH_CHECKS = "scale/quality/batch/runs"  # periodic checks run during the crawl
QUALITY_BATCH_FAILED = "scale/quality/batch/failed"  # checks failing at the last periodic run
QUALITY_SNAPSHOTS = "scale/quality/snapshots"  # raw snapshots written
QUALITY_SNAPSHOTS_DROPPED = "scale/quality/snapshots_dropped"  # oldest dropped to stay within bounds
QUALITY_REPLAY_IGNORED = "scale/quality/replay/ignored_requests"  # requests a replayed callback made


def outcome(cls: str) -> str:
    return OUTCOME + cls


def retry(cls: str) -> str:
    return RETRY + cls


def gave_up(cls: str) -> str:
    return GAVE_UP + cls


def retry_depth(n: int) -> str:
    return f"{RETRY_DEPTH}{n}"


def error_group(cls: str, reason: str | None) -> str:
    return f"{ERROR_GROUP}{cls}/{reason or '-'}"


def egress_pool(state: str) -> str:
    return EGRESS_POOL + state


def egress_wait(reason: str) -> str:
    return EGRESS_WAIT + reason


def egress_state_skipped(kind: str) -> str:
    return EGRESS_STATE_SKIPPED + kind


def egress_requests(egress: str) -> str:
    return f"{EGRESS_BY}{egress}/requests"


def egress_failures(egress: str, cls: str) -> str:
    return f"{EGRESS_BY}{egress}/failed/{cls}"


def egress_route_capped(egress: str, domain: str) -> str:
    return f"{EGRESS_ROUTE_CAPPED}{egress}/{domain}"


def throttle_site(site: str, field: str) -> str:
    """``scale/throttle/site/<site>/<field>``: delay, rate, requests, rate_limited, paused_seconds."""
    return f"{THROTTLE_SITE}{site}/{field}"
