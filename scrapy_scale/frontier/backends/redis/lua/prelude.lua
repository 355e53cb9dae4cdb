local K = KEYS[1]
local RUN = redis.call('HGET', K..':run', 'id') or '0'
local P = K..':'..RUN
local NAMES = {[0]='pending', [1]='delayed', [2]='leased', [3]='done', [4]='failed'}
local function rk(fp) return P..':r:'..fp end
-- The counters a call changes are summed here and written once, by flush(), which every
-- script that changes records calls last (one HINCRBY per counter and call, not per record)
local CNT, CNT_ORDER = {}, {}
local function cnt(field, by)
  local v = CNT[field]
  if v == nil then CNT_ORDER[#CNT_ORDER + 1] = field v = 0 end
  CNT[field] = v + by
end
local function flush()
  for _, f in ipairs(CNT_ORDER) do
    if CNT[f] ~= 0 then redis.call('HINCRBY', P..':cnt', f, CNT[f]) end
  end
  CNT, CNT_ORDER = {}, {}
end
-- a record's state change counted (the caller writes its st field)
local function move(old, new)
  if old ~= nil then cnt(NAMES[old], -1) end
  cnt(NAMES[new], 1)
end
local function set_state(fp, old, new)
  move(old, new)
  redis.call('HSET', rk(fp), 'st', new)
end
-- the domains (per priority) and priorities this call has already made ready: no script
-- takes one away after it pushed in the same call (lease only promotes, first)
local READY, PRIOS = {}, {}
local function push_ready(fp, p, dom, front)
  local q = P..':q:'..p..':'..dom
  if front then redis.call('LPUSH', q, qpack(fp)) else redis.call('RPUSH', q, qpack(fp)) end
  local pd = p..':'..dom
  if not READY[pd] then
    READY[pd] = true
    if not redis.call('ZSCORE', P..':dq:'..p, dom) then redis.call('ZADD', P..':dq:'..p, 0, dom) end
  end
  if not PRIOS[p] then
    PRIOS[p] = true
    redis.call('ZADD', P..':prios', tonumber(p), p)
  end
end
-- Done fingerprints (what dedup and status need of a done record) live in small hashes,
-- not in a record each: bucket P:d:<first L characters>, member = the rest, hex packed to
-- bytes, value empty. Each bucket stays a listpack (a few dozen members): L grows with
-- the done count, DONE_FILL members per bucket on average at each level, so a lookup asks
-- at most one bucket per level. A bucket of another type (written by someone else) is
-- skipped when read and replaced when written: the URL may be fetched again, never lost.
local DONE_LEVELS, DONE_FILL = {3, 4, 5, 6, 7}, 64
local DONE_AT_N, DONE_AT_L = nil, nil  -- the last count asked and its level (one per call, mostly)
local function done_level(n)
  if n == DONE_AT_N then return DONE_AT_L end
  DONE_AT_N, DONE_AT_L = n, DONE_LEVELS[#DONE_LEVELS]
  local cap = 0
  for _, L in ipairs(DONE_LEVELS) do
    cap = cap + DONE_FILL * 16 ^ L
    if n < cap then DONE_AT_L = L return L end
  end
  return DONE_AT_L
end
local function done_parts(fp, L)
  local pk = PACKED[fp]
  if pk then  -- its hex after L characters, packed: the client's packing from the 1st or 2nd
    if L % 2 == 0 then return P..':d:'..string.sub(fp, 1, L), string.sub(pk, L / 2 + 1) end
    return P..':d:'..string.sub(fp, 1, L), string.sub(PACKED2[fp], (L - 1) / 2 + 1)
  end
  local rest = string.sub(fp, L + 1)
  if string.find(rest, '^%x+$') then
    rest = string.gsub(rest, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
  end
  return P..':d:'..string.sub(fp, 1, L), rest
end
local DONE_N = nil  -- the done count as stored, read once per call
local function done_count()
  if DONE_N == nil then DONE_N = tonumber(redis.call('HGET', P..':cnt', 'dn')) or 0 end
  return DONE_N + (CNT['dn'] or 0)
end
local function done_find(fp)
  local top = done_level(done_count())
  for _, L in ipairs(DONE_LEVELS) do
    if L > top then break end
    local k, m = done_parts(fp, L)
    local ok, got = pcall(redis.call, 'HEXISTS', k, m)
    if ok and got == 1 then return L end
  end
  return nil
end
local function done_add(fp)
  local k, m = done_parts(fp, done_level(done_count()))
  if not pcall(redis.call, 'HSET', k, m, '') then
    redis.call('DEL', k)
    redis.call('HSET', k, m, '')
    cnt('bad_done', 1)
  end
  cnt('dn', 1)
end
local function done_del(fp, L)
  local k, m = done_parts(fp, L)
  pcall(redis.call, 'HDEL', k, m)
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
local UNREADABLE_NAMES = {'d', 'a', 'el', 'enq', 't'}
local function unreadable(r)
  -- why a ready record cannot be leased and read back (a corrupt hash), or nil; r: its
  -- fields d, a, el, enq, t as read
  local names = UNREADABLE_NAMES
  r = {r[1], r[2], r[3] or r[4], r[4], r[5]}  -- no el: eligible since it was enqueued
  for i = 1, 5 do
    local v = r[i]
    if not v then return 'field '..names[i]..' is missing' end
    if (i == 2 or i == 5) and not string.find(v, '^%-?%d+$') then
      return 'field '..names[i]..'='..string.format('%q', string.sub(v, 1, 50))..' is not an integer'
    end
    if (i == 3 or i == 4) and (not tonumber(v) or string.find(v, '[xX]')) then
      return 'field '..names[i]..'='..string.format('%q', string.sub(v, 1, 50))..' is not a number'
    end
    local x = tonumber(v)
    if (i == 3 or i == 4) and not (x > -math.huge and x < math.huge) then  -- inf, -inf, nan
      return 'field '..names[i]..'='..string.format('%q', string.sub(v, 1, 50))..' is not a finite number'
    end
  end
  return nil
end
local function promote(now)
  local due = redis.call('ZRANGEBYSCORE', P..':delayed', '-inf', now, 'LIMIT', 0, 1000)
  for i = #due, 1, -1 do  -- each to the head: the earliest due ends first
    local fp = due[i]
    -- a due retry (or a request waiting for its turn) goes first in its queue
    if redis.call('HGET', rk(fp), 'st') == '1' then to_ready(fp, true)
    else redis.call('ZREM', P..':delayed', fp) end
  end
end
