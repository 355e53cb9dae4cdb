"""The Redis frontier store: many workers, atomic Lua scripts, Cluster-safe keys.

Every key of a job starts with ``scale:{JOB}`` (the ``{JOB}`` hash tag puts a
job's keys in one Redis Cluster slot, so its scripts run on Cluster too). Keys of
one run live under ``scale:{JOB}:RUN:`` so starting a new run is one atomic
switch; the old run's keys are unlinked afterwards.

    scale:{J}:run            HASH  current run: id, started, ended
    scale:{J}:runs           HASH  run id -> JSON (history)
    scale:{J}:workers        HASH  worker id -> pid (claim_worker)
    scale:{J}:alive          HASH  worker id -> "last_beat until" (heartbeat; see redis_status)
    scale:{J}:seeds          LIST  JSON seeds pushed by feeders (RPUSH; see docs/frontier.md)
    scale:{J}:R:r:FP         HASH  one record: st d dom p a el enq fc fr o le t
    scale:{J}:R:prios        ZSET  priorities with ready work
    scale:{J}:R:dq:P         ZSET  domains with ready work at priority P, by last service
    scale:{J}:R:q:P:DOMAIN   LIST  ready fingerprints, FIFO (stale entries skipped at lease)
    scale:{J}:R:delayed      ZSET  delayed fingerprints by eligible time
    scale:{J}:R:leases       ZSET  leased fingerprints by lease expiry
    scale:{J}:R:wl:WORKER    SET   fingerprints leased by a worker
    scale:{J}:R:owners       SET   workers that leased in this run
    scale:{J}:R:failed:CLS   SET   failed fingerprints of a class
    scale:{J}:R:cnt          HASH  counters by state, fail:CLS, wait_sum, wait_n, served
    scale:{J}:R:dead/deadz   HASH/ZSET dead letters

Connection drops (a Redis restart) are retried with backoff for as long as
``retry_for`` allows (forever by default: the worker waits). Scripts are
idempotent under a retry: tokens make a repeated ack a no-op, a repeated enqueue
is a duplicate, and a lease whose reply was lost expires (it is not renewed).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier import redis_status
from scrapy_scale.frontier.store import (
    COUNT_KEYS,
    DeadLetter,
    EnqueueResult,
    FrontierError,
    FrontierFatal,
    FrontierStore,
    Leased,
    NewRequest,
    RunInfo,
    State,
    Status,
)
from scrapy_scale.redact import redact_url

logger = logging.getLogger(__name__)
T = TypeVar("T")

_PRELUDE = r"""
local K = KEYS[1]
local RUN = redis.call('HGET', K..':run', 'id') or '0'
local P = K..':'..RUN
local NAMES = {[0]='pending', [1]='delayed', [2]='leased', [3]='done', [4]='failed'}
local function rk(fp) return P..':r:'..fp end
local function cnt(field, by) redis.call('HINCRBY', P..':cnt', field, by) end
local function set_state(fp, old, new)
  if old ~= nil then cnt(NAMES[old], -1) end
  cnt(NAMES[new], 1)
  redis.call('HSET', rk(fp), 'st', new)
end
local function push_ready(fp, p, dom, front)
  local q = P..':q:'..p..':'..dom
  if front then redis.call('LPUSH', q, fp) else redis.call('RPUSH', q, fp) end
  if not redis.call('ZSCORE', P..':dq:'..p, dom) then redis.call('ZADD', P..':dq:'..p, 0, dom) end
  redis.call('ZADD', P..':prios', tonumber(p), p)
end
local function detach(fp, st, owner, fc)
  if st == 1 then redis.call('ZREM', P..':delayed', fp)
  elseif st == 2 then
    redis.call('ZREM', P..':leases', fp)
    if owner then redis.call('SREM', P..':wl:'..owner, fp) end
  elseif st == 4 then
    redis.call('SREM', P..':failed:'..(fc or ''), fp)
    cnt('fail:'..(fc or ''), -1)
  end
end
local function to_ready(fp, front)
  local r = redis.call('HMGET', rk(fp), 'st', 'o', 'p', 'dom', 'fc')
  local st = tonumber(r[1])
  detach(fp, st, r[2], r[5])
  set_state(fp, st, 0)
  redis.call('HDEL', rk(fp), 'o', 'le')
  push_ready(fp, r[3], r[4], front)
end
local function to_dead(fp, reason, now)
  local r = redis.call('HMGET', rk(fp), 'st', 'o', 'fc', 'd')
  if not r[1] then return 0 end
  local st = tonumber(r[1])
  if NAMES[st] then
    detach(fp, st, r[2], r[3])
    cnt(NAMES[st], -1)
  end
  redis.call('DEL', rk(fp))
  redis.call('HSET', P..':dead', fp, cjson.encode({reason = reason, data = r[4] or '', at = now}))
  redis.call('ZADD', P..':deadz', now, fp)
  return 1
end
local function unreadable(fp)
  -- why a ready record cannot be leased and read back (a corrupt hash), or nil
  local r = redis.call('HMGET', rk(fp), 'd', 'a', 'el', 'enq', 't')
  local names = {'d', 'a', 'el', 'enq', 't'}
  for i = 1, 5 do
    local v = r[i]
    if not v then return 'field '..names[i]..' is missing' end
    if (i == 2 or i == 5) and not string.find(v, '^%-?%d+$') then
      return 'field '..names[i]..'='..string.format('%q', string.sub(v, 1, 50))..' is not an integer'
    end
    if (i == 3 or i == 4) and (not tonumber(v) or string.find(v, '[xX]')) then
      return 'field '..names[i]..'='..string.format('%q', string.sub(v, 1, 50))..' is not a number'
    end
  end
  return nil
end
local function promote(now)
  local due = redis.call('ZRANGEBYSCORE', P..':delayed', '-inf', now, 'LIMIT', 0, 1000)
  for _, fp in ipairs(due) do
    if redis.call('HGET', rk(fp), 'st') == '1' then to_ready(fp, false)
    else redis.call('ZREM', P..':delayed', fp) end
  end
end
"""

_ENQUEUE = _PRELUDE + r"""
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 11 do
  local fp, data, dom, p = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  local nb, att, fc, fr, flag = tonumber(ARGV[i+4]), ARGV[i+5], ARGV[i+6], ARGV[i+7], ARGV[i+8]
  local held, hsecs = ARGV[i+9], tonumber(ARGV[i+10])
  local el = math.max(now, nb)
  local st = 0
  if el > now then st = 1 end
  local key = rk(fp)
  local cur = redis.call('HMGET', key, 'st', 'o', 'fc')
  local res = 'duplicate'
  if not cur[1] then
    redis.call('HSET', key, 'd', data, 'dom', dom, 'p', p, 'a', att, 'el', el, 'enq', now, 't', 0)
    if fc ~= '' then redis.call('HSET', key, 'fc', fc, 'fr', fr) end
    if held ~= '' then
      -- kept in its worker's memory only: leased to it from the start (token 0)
      st = 2
      redis.call('HSET', key, 'o', held, 'le', now + hsecs)
      redis.call('ZADD', P..':leases', now + hsecs, fp)
      redis.call('SADD', P..':wl:'..held, fp)
      redis.call('SADD', P..':owners', held)
    end
    set_state(fp, nil, st)
    res = 'added'
  elseif held ~= '' then
    res = 'duplicate'
  else
    local old = tonumber(cur[1])
    if flag == 'u' or (flag == 'r' and old >= 3) then
      detach(fp, old, cur[2], cur[3])
      if flag ~= 'u' then att = 0 end
      redis.call('HSET', key, 'd', data, 'dom', dom, 'p', p, 'a', att, 'el', el)
      redis.call('HINCRBY', key, 't', 1)
      redis.call('HDEL', key, 'o', 'le')
      if fc ~= '' then redis.call('HSET', key, 'fc', fc, 'fr', fr) else redis.call('HDEL', key, 'fc', 'fr') end
      set_state(fp, old, st)
      if flag == 'u' then res = 'updated' else res = 'reopened' end
    end
  end
  if res ~= 'duplicate' and st < 2 then
    if st == 1 then redis.call('ZADD', P..':delayed', el, fp) else push_ready(fp, p, dom, false) end
  end
  out[#out + 1] = res
end
return out
"""

_LEASE = _PRELUDE + r"""
local now, worker, n, secs = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
promote(now)
local out = {}
local bad = {}
local left = n
local wait_sum, wait_n = 0, 0
local prios = redis.call('ZREVRANGE', P..':prios', 0, -1)
for _, p in ipairs(prios) do
  if left <= 0 then break end
  local dqk = P..':dq:'..p
  local active = redis.call('ZRANGE', dqk, 0, left - 1)
  local considered = {}
  for _, d in ipairs(active) do considered[d] = true end
  local order = {}
  local seen = {}
  while left > 0 and #active > 0 do
    local still = {}
    local dropped = false
    for _, dom in ipairs(active) do
      if left <= 0 then break end
      local q = P..':q:'..p..':'..dom
      local got = nil
      while true do
        local fp = redis.call('LPOP', q)
        if not fp then break end
        local r = redis.call('HMGET', rk(fp), 'st', 'p', 'dom')
        if r[1] == '0' and r[2] == p and r[3] == dom then
          local why = unreadable(fp)
          if not why then got = fp break end
          -- dead-lettered alone, with its reason; the rest of the batch goes on
          why = 'unreadable record: '..why
          to_dead(fp, why, now)
          bad[#bad + 1] = {fp, '', dom, p, '0', '0', '0', '0', '', '', why}
        end
      end
      if got then
        local key = rk(got)
        local t = redis.call('HINCRBY', key, 't', 1)
        set_state(got, 0, 2)
        redis.call('HSET', key, 'o', worker, 'le', now + secs)
        redis.call('ZADD', P..':leases', now + secs, got)
        redis.call('SADD', P..':wl:'..worker, got)
        redis.call('SADD', P..':owners', worker)
        local r = redis.call('HMGET', key, 'd', 'a', 'enq', 'el', 'fc', 'fr')
        local el = tonumber(r[4])
        if now > el then wait_sum = wait_sum + (now - el) end
        wait_n = wait_n + 1
        out[#out + 1] = {got, r[1], dom, p, r[2], r[3], r[4], t, r[5] or '', r[6] or '', ''}
        left = left - 1
        if not seen[dom] then seen[dom] = true order[#order + 1] = dom end
        still[#still + 1] = dom
      else
        redis.call('ZREM', dqk, dom)
        dropped = true
      end
    end
    if dropped and left > 0 then
      for _, d in ipairs(redis.call('ZRANGE', dqk, 0, left + #still - 1)) do
        if not considered[d] then considered[d] = true still[#still + 1] = d end
      end
    end
    active = still
  end
  for _, dom in ipairs(order) do
    local s = redis.call('HINCRBY', P..':cnt', 'served', 1)
    redis.call('ZADD', dqk, 'XX', s, dom)
  end
  if redis.call('ZCARD', dqk) == 0 then redis.call('ZREM', P..':prios', p) end
end
if wait_n > 0 then
  redis.call('HINCRBYFLOAT', P..':cnt', 'wait_sum', wait_sum)
  cnt('wait_n', wait_n)
end
for _, row in ipairs(bad) do out[#out + 1] = row end
return out
"""

_RENEW = _PRELUDE + r"""
local worker, until_ = ARGV[1], tonumber(ARGV[2])
local fps = {}
if #ARGV > 2 then for i = 3, #ARGV do fps[#fps + 1] = ARGV[i] end
else fps = redis.call('SMEMBERS', P..':wl:'..worker) end
local n = 0
for _, fp in ipairs(fps) do
  local r = redis.call('HMGET', rk(fp), 'st', 'o')
  if r[1] == '2' and r[2] == worker then
    redis.call('HSET', rk(fp), 'le', until_)
    redis.call('ZADD', P..':leases', until_, fp)
    n = n + 1
  end
end
return n
"""

_FINISH = _PRELUDE + r"""
local worker, target = ARGV[1], tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV, 4 do
  local fp, tok = ARGV[i], ARGV[i+1]
  local r = redis.call('HMGET', rk(fp), 'st', 't', 'o', 'fc')
  local st = tonumber(r[1])
  if st and st <= 2 and r[2] == tok then
    detach(fp, st, r[3], r[4])
    set_state(fp, st, target)
    redis.call('HDEL', rk(fp), 'o', 'le')
    if target == 3 then
      redis.call('HDEL', rk(fp), 'd')
    else
      local cls = ARGV[i+2]
      redis.call('HSET', rk(fp), 'fc', cls, 'fr', ARGV[i+3])
      redis.call('SADD', P..':failed:'..cls, fp)
      cnt('fail:'..cls, 1)
    end
    n = n + 1
  end
end
return n
"""

_RELEASE = _PRELUDE + r"""
local mode, worker, now = ARGV[1], ARGV[2], ARGV[3]
local fps = {}
if mode == 'reclaim' then
  fps = redis.call('ZRANGEBYSCORE', P..':leases', '-inf', '('..now)
  if worker ~= '' then
    for _, fp in ipairs(redis.call('SMEMBERS', P..':wl:'..worker)) do fps[#fps + 1] = fp end
  end
elseif #ARGV > 3 then
  for i = 4, #ARGV do fps[#fps + 1] = ARGV[i] end
else
  fps = redis.call('SMEMBERS', P..':wl:'..worker)
end
local n = 0
for _, fp in ipairs(fps) do
  local r = redis.call('HMGET', rk(fp), 'st', 'o')
  if r[1] == '2' and (mode == 'reclaim' or r[2] == worker) then
    to_ready(fp, true)
    n = n + 1
  elseif not r[1] then
    redis.call('ZREM', P..':leases', fp)
  end
end
return n
"""

_DEAD = _PRELUDE + r"""
return to_dead(ARGV[1], ARGV[2], tonumber(ARGV[3]))
"""

_RESOLVE = _PRELUDE + r"""
local n = 0
for i = 1, #ARGV do
  local fp = ARGV[i]
  local r = redis.call('HMGET', rk(fp), 'st', 'fc')
  if r[1] == '4' then
    detach(fp, 4, nil, r[2])
    set_state(fp, 4, 3)
    redis.call('HDEL', rk(fp), 'd', 'fc', 'fr')
    n = n + 1
  end
end
return n
"""

_REQUEUE = _PRELUDE + r"""
local now, cls = tonumber(ARGV[1]), ARGV[2]
local classes = {}
if cls ~= '' then classes = {cls}
else
  local all = redis.call('HGETALL', P..':cnt')
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 5) == 'fail:' then classes[#classes + 1] = string.sub(all[i], 6) end
  end
end
local n = 0
for _, c in ipairs(classes) do
  for _, fp in ipairs(redis.call('SMEMBERS', P..':failed:'..c)) do
    if redis.call('HGET', rk(fp), 'st') == '4' then
      redis.call('HSET', rk(fp), 'a', 0, 'el', now)
      redis.call('HINCRBY', rk(fp), 't', 1)
      to_ready(fp, false)
      n = n + 1
    end
  end
end
return n
"""

_RUN = r"""
local K = KEYS[1]
local op, now = ARGV[1], tonumber(ARGV[2])
local cur = redis.call('HMGET', K..':run', 'id', 'started', 'ended')
local function counts(id)
  local all = redis.call('HGETALL', K..':'..id..':cnt')
  local c = {}
  for i = 1, #all, 2 do c[all[i]] = tonumber(all[i + 1]) end
  return c
end
local function record(id, started, ended, c)
  redis.call('HSET', K..':runs', id, cjson.encode({run_id = tonumber(id), started_at = tonumber(started),
    ended_at = ended or false, counts = c}))
end
local function new_run()
  redis.call('DEL', K..':alive')
  local id = redis.call('HINCRBY', K..':meta', 'runseq', 1)
  redis.call('HSET', K..':run', 'id', id, 'started', now, 'ended', '')
  record(id, now, nil, {})
  return id
end
local running = cur[1] and cur[3] == ''
if op == 'begin' then
  if running then return {'resumed', cur[1], cur[2], ''} end
  local old = cur[1] or ''
  local id = new_run()
  return {'new', tostring(id), tostring(now), old}
elseif op == 'finish' then
  if not cur[1] then return {} end
  if not running then return {'ended', cur[1], cur[2], cur[3]} end
  local c = counts(cur[1])
  if (c['pending'] or 0) + (c['delayed'] or 0) + (c['leased'] or 0) > 0 then return {} end
  redis.call('HSET', K..':run', 'ended', now)
  local clean = {}
  for _, k in ipairs({'pending', 'delayed', 'leased', 'done', 'failed'}) do clean[k] = c[k] or 0 end
  record(cur[1], cur[2], now, clean)
  return {'ended', cur[1], cur[2], tostring(now), cjson.encode(clean)}
elseif op == 'reopen' then
  if not cur[1] then new_run() return 1 end
  if not running then
    redis.call('HSET', K..':run', 'ended', '')
    record(cur[1], cur[2], nil, {})
  end
  return 1
elseif op == 'reset' then
  if running then
    redis.call('HSET', K..':run', 'ended', now)
    record(cur[1], cur[2], now, {reset = 1})
  end
  redis.call('DEL', K..':seeds', K..':workers', K..':alive')
  return cur[1] or ''
end
"""

_COUNTS = r"""
local K = KEYS[1]
local run = redis.call('HGET', K..':run', 'id')
if not run then return {''} end
local P = K..':'..run
local c = redis.call('HMGET', P..':cnt', 'pending', 'delayed', 'leased', 'done', 'failed')
local out = {run}
for i = 1, 5 do out[#out + 1] = c[i] or '0' end
out[#out + 1] = tostring(redis.call('HLEN', P..':dead'))
return out
"""

_CLAIM = r"""
local K = KEYS[1]
local wid, expected, pid = ARGV[1], ARGV[2], ARGV[3]
local old = redis.call('HGET', K..':workers', wid) or ''
if old ~= expected then return 0 end
redis.call('HSET', K..':workers', wid, pid)
return 1
"""

_RETRYABLE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
try:  # a Cluster that is failing over or resharding
    from redis.exceptions import ClusterDownError, TryAgainError

    _RETRYABLE += (ClusterDownError, TryAgainError)
except ImportError:  # pragma: no cover
    pass


class RedisStore(FrontierStore):
    schemes = ("redis", "rediss")

    #: seconds to keep retrying when Redis is unreachable after open(); None = forever
    retry_for: float | None = None

    def __init__(self, url: str, job: str, clock: clock_mod.Clock = clock_mod.wall):
        super().__init__(job, clock)
        self.url = url
        self.key = f"scale:{{{job}}}"
        self._r: Any = None
        self._scripts: dict[str, Any] = {}
        self.sleep: Callable[[float], None] = time.sleep
        #: True when the URL points at a Redis Cluster node
        self.cluster = False
        #: the run this store began (begin_run) and the most records (+ dead letters) it
        #: has seen in it: a Redis that lost the job's state is caught by counts()
        self._run_id: str | None = None
        self._high = 0

    # ---- connection ------------------------------------------------------------------

    def open(self) -> None:
        if self._r is not None:
            return
        opts: dict[str, Any] = {"socket_timeout": 30, "socket_connect_timeout": 5, "decode_responses": True}
        try:
            r: Any = redis.Redis.from_url(self.url, health_check_interval=15, **opts)
            r.ping()
            if str(r.info("cluster").get("cluster_enabled", 0)) == "1":
                # a Cluster node: talk to the cluster (every key of a job is in one slot)
                from redis.cluster import RedisCluster

                r.close()
                r = RedisCluster.from_url(self.url, **opts)
                r.ping()
                self.cluster = True
        except (redis.RedisError, ValueError) as e:
            raise FrontierError(
                f"cannot reach Redis for the frontier at {redact_url(self.url)} ({type(e).__name__}: {e}); "
                "start Redis there, or fix SCALE_FRONTIER_URL"
            ) from None
        self._r = r
        for name, src in (("enqueue", _ENQUEUE), ("lease", _LEASE), ("renew", _RENEW), ("finish", _FINISH),
                          ("release", _RELEASE), ("dead", _DEAD), ("requeue", _REQUEUE), ("resolve", _RESOLVE),
                          ("status", redis_status.SUMMARY), ("heads", redis_status.HEADS), ("run", _RUN),
                          ("claim", _CLAIM), ("counts", _COUNTS)):
            self._scripts[name] = r.register_script(src)

    def close(self) -> None:
        if self._r is not None:
            self._r.close()
            self._r = None

    @property
    def r(self) -> Any:  # redis.Redis with decode_responses=True: str replies
        if self._r is None:
            raise FrontierError("the Redis frontier is not open")
        return self._r

    def _retry(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; on a dropped connection wait (backoff up to 5 s) and retry."""
        delay = 0.1
        start = time.monotonic()
        warned = False
        while True:
            try:
                result = fn()
                if warned:
                    logger.warning("Redis frontier at %s is back", redact_url(self.url))
                return result
            except _RETRYABLE as e:
                if self.retry_for is not None and time.monotonic() - start > self.retry_for:
                    raise FrontierError(f"Redis at {redact_url(self.url)} unreachable: {e}") from None
                if not warned:
                    logger.warning("Redis frontier at %s unreachable (%s); waiting for it",
                                   redact_url(self.url), e)
                    warned = True
                self.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _call(self, script: str, *args: Any) -> Any:
        return self._retry(lambda: self._scripts[script](keys=[self.key], args=list(args)))

    def _run_prefix(self) -> str:
        run = self._retry(lambda: self.r.hget(f"{self.key}:run", "id")) or "0"
        return f"{self.key}:{run}"

    def _unlink_run(self, run_id: str) -> None:
        if not run_id:
            return
        pattern = f"{glob_escape(self.key)}:{glob_escape(run_id)}:*"

        def unlink() -> None:
            batch: list[str] = []
            for k in self.r.scan_iter(match=pattern, count=1000):
                batch.append(k)
                if len(batch) >= 500:
                    self.r.unlink(*batch)
                    batch = []
            if batch:
                self.r.unlink(*batch)

        self._retry(unlink)

    # ---- runs ------------------------------------------------------------------------

    def begin_run(self) -> RunInfo:
        kind, rid, started, old = self._call("run", "begin", self.clock())
        if kind == "new":
            self._unlink_run(old)
        self._run_id, self._high = str(rid), 0
        return RunInfo(int(rid), float(started), None, kind == "resumed", {})

    def finish_run(self) -> RunInfo | None:
        res = self._call("run", "finish", self.clock())
        if not res:
            return None
        self._run_id = None  # ended: a later run of the job is no loss of state
        counts = json.loads(res[4]) if len(res) > 4 else self._run_counts(res[1])
        return RunInfo(int(res[1]), float(res[2]), float(res[3]), False, counts)

    def _run_counts(self, rid: str) -> dict[str, int]:
        raw = self._retry(lambda: self.r.hget(f"{self.key}:runs", rid))
        return dict(json.loads(raw).get("counts") or {}) if raw else {}

    def runs(self) -> list[RunInfo]:
        raw = self._retry(lambda: self.r.hvals(f"{self.key}:runs"))
        out = [_run_from_json(x) for x in raw]
        return sorted(out, key=lambda r: r.run_id)

    def reopen_run(self) -> None:
        self._call("run", "reopen", self.clock())

    # ---- workers ---------------------------------------------------------------------

    def claim_worker(self, prefix: str, pid: int, is_alive: Callable[[int], bool]) -> str:
        while True:
            known: dict[str, str] = self._retry(lambda: self.r.hgetall(f"{self.key}:workers"))
            slot = 0
            while True:
                wid = f"{prefix}/{slot}"
                old = known.get(wid)
                if old is None or int(old) == pid or not is_alive(int(old)):
                    break
                slot += 1
            if self._call("claim", wid, old or "", str(pid)):
                return wid

    @property
    def alive_key(self) -> str:
        return f"{self.key}:alive"

    def heartbeat(self, worker: str, until: float) -> None:
        now = self.clock()
        self._retry(lambda: self.r.hset(self.alive_key, worker, f"{now!r} {until!r}"))

    # ---- hot path --------------------------------------------------------------------

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        out: list[EnqueueResult] = []
        for i in range(0, len(requests), 500):
            args: list[Any] = [self.clock()]
            for r in requests[i:i + 500]:
                fc, fr = r.last_failure if r.last_failure else ("", "")
                flag = "u" if r.update else ("r" if r.reopen else "")
                args += [r.fingerprint, r.data, r.domain, str(int(r.priority)), float(r.not_before or 0),
                         int(r.attempts), fc, fr, flag, r.held_by, float(r.held_seconds)]
            out += [EnqueueResult(x) for x in self._call("enqueue", *args)]
        return out

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        rows = self._call("lease", self.clock(), worker, int(n), float(seconds))
        out = []
        for fp, d, dom, p, a, enq, el, t, fc, fr, bad in rows:
            if not bad:
                try:
                    out.append(Leased(fp, d, dom, int(p), _field("a", a, int), _field("enq", enq, float),
                                      _field("el", el, float), _field("t", t, int), (fc, fr) if fc else None))
                    continue
                except ValueError as e:
                    bad = f"unreadable record: {e}"
                    self.dead_letter(fp, bad)
            out.append(Leased(fp, "", dom, 0, 0, 0.0, 0.0, 0, error=bad))
        return out

    def renew(self, worker: str, seconds: float, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        return int(self._call("renew", worker, self.clock() + seconds, *(fingerprints or ())))

    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        if not done:
            return 0
        args: list[Any] = [worker, 3]
        for fp, tok in done:
            args += [fp, str(tok), "", ""]
        return int(self._call("finish", *args))

    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        if not failed:
            return 0
        args: list[Any] = [worker, 4]
        for fp, tok, cls, reason in failed:
            args += [fp, str(tok), cls, reason]
        return int(self._call("finish", *args))

    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        return int(self._call("release", "release", worker, self.clock(), *(fingerprints or ())))

    def reclaim(self, worker: str | None = None) -> int:
        return int(self._call("release", "reclaim", worker or "", self.clock()))

    def dead_letter(self, fingerprint: str, reason: str) -> None:
        self._call("dead", fingerprint, reason, self.clock())

    def dead_letter_count(self) -> int:
        p = self._run_prefix()
        return int(self._retry(lambda: self.r.hlen(f"{p}:dead")))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        p = self._run_prefix()

        def read() -> list[DeadLetter]:
            fps = self.r.zrange(f"{p}:deadz", 0, limit - 1)
            if not fps:
                return []
            out = []
            for fp, raw in zip(fps, self.r.hmget(f"{p}:dead", fps), strict=True):
                if raw:
                    d = json.loads(raw)
                    out.append(DeadLetter(fp, d["reason"], d["data"], float(d["at"])))
            return out

        return self._retry(read)

    # ---- feeders -----------------------------------------------------------------------

    @property
    def feed_key(self) -> str:
        return f"{self.key}:seeds"

    def pop_feed(self, n: int) -> list[str]:
        got = self._retry(lambda: self.r.lpop(self.feed_key, n))
        return list(got or [])

    # ---- observation -------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        run, *vals = self._call("counts")  # [''] when the job has no run at all
        vals = vals or ["0"] * (len(COUNT_KEYS) + 1)
        counts = {k: int(v) for k, v in zip(COUNT_KEYS, vals, strict=False)}
        if self._run_id is not None:
            self._check_intact(run, sum(counts.values()) + int(vals[-1]))
        return counts

    def _check_intact(self, run: str, total: int) -> None:
        """Within a run, records are only added (a dead letter moves one): a run marker that
        vanished or changed, or fewer records than seen before, means the state is gone."""
        where = f"Redis at {redact_url(self.url)}"
        if run != self._run_id:
            now = f"run {run} is current" if run else f"the run marker {self.key}:run is gone"
            raise FrontierFatal(
                f"{where} no longer has job {self.job!r}'s run {self._run_id} ({now}): the server lost "
                "the job's state (restarted without persistence, flushed, or failed over to a replica "
                "that had not caught up), or the job was reset or finished and started again meanwhile. Requests that were only in "
                "Redis are lost, so this worker stops instead of declaring the run finished. Run Redis "
                "with `appendonly yes`, then start the job again")
        if total < self._high:
            raise FrontierFatal(
                f"{where}: job {self.job!r} run {run} has {total} records (with dead letters), fewer than the "
                f"{self._high} seen before: the server lost writes (restarted from an older snapshot, or "
                "failed over to a replica that had not caught up). Requests that were only in Redis are "
                "lost, so this worker stops instead of declaring the run finished. Run Redis with "
                "`appendonly yes`, then start the job again")
        self._high = total

    def durability_warning(self) -> str | None:
        """Neither AOF nor RDB snapshots (CONFIG GET, where the server allows it)."""
        try:
            cfg: dict[str, str] = {}
            for name in ("appendonly", "save"):
                cfg.update(self.r.config_get(name))
        except redis.RedisError as e:  # CONFIG disabled or renamed (managed Redis): cannot tell
            logger.debug("Redis persistence unknown (CONFIG GET refused: %s)", e)
            return None
        if cfg.get("appendonly") == "no" and not (cfg.get("save") or "").strip():
            return (f"Redis at {redact_url(self.url)} has no persistence (appendonly no, no RDB snapshots): "
                    "a restart of it loses the job's frontier. Run it with `appendonly yes` for a crawl "
                    "that survives a Redis restart")
        return None

    def next_eligible_at(self) -> float | None:
        p = self._run_prefix()
        got = self._retry(lambda: self.r.zrange(f"{p}:delayed", 0, 0, withscores=True))
        return float(got[0][1]) if got else None

    def status(self) -> Status:
        return redis_status.read_status(self)

    def _current_run(self) -> RunInfo | None:
        rid = self._retry(lambda: self.r.hget(f"{self.key}:run", "id"))
        if not rid:
            return None
        raw = self._retry(lambda: self.r.hget(f"{self.key}:runs", rid))
        return _run_from_json(raw) if raw else None

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        p = self._run_prefix()
        h = self._retry(lambda: self.r.hgetall(f"{p}:r:{fingerprint}"))
        if not h:
            return None
        st = int(h["st"])
        return {
            "fingerprint": fingerprint,
            "state": (State.PENDING, State.PENDING, State.LEASED, State.DONE, State.FAILED)[st],
            "data": h.get("d", ""),
            "domain": h["dom"],
            "priority": int(h["p"]),
            "attempts": int(h["a"]),
            "eligible_at": float(h["el"]),
            "enqueued_at": float(h["enq"]),
            "last_failure": (h["fc"], h.get("fr", "")) if h.get("fc") else None,
            "owner": h.get("o"),
            "lease_expires": float(h["le"]) if h.get("le") else None,
            "token": int(h["t"]),
        }

    # ---- commands ----------------------------------------------------------------------

    def reset(self) -> None:
        self._run_id = None
        old = self._call("run", "reset", self.clock())
        self._unlink_run(str(old))

    def resolve(self, fingerprints: Sequence[str]) -> int:
        if not fingerprints:
            return 0
        return int(self._call("resolve", *fingerprints))

    def requeue(self, cls: str | None = None) -> int:
        n = int(self._call("requeue", self.clock(), cls or ""))
        if n:
            self.reopen_run()
        return n


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern (``*?[]\\`` escaped): a job named
    ``books[1]`` must never match the keys of ``books1``."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _field(name: str, value: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"field {name}={value[:50]!r} is not a number") from None


def _run_from_json(raw: str) -> RunInfo:
    d = json.loads(raw)
    counts = d.get("counts") or {}
    return RunInfo(int(d["run_id"]), float(d["started_at"]),
                   None if d.get("ended_at") in (False, None) else float(d["ended_at"]),
                   False, dict(counts) if isinstance(counts, dict) else {})
