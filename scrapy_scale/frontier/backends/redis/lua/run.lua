local K = KEYS[1]
local op, now = ARGV[1], tonumber(ARGV[2])
local cur = redis.call('HMGET', K..':run', 'id', 'started', 'ended')
local function counts(id)
  local all = redis.call('HGETALL', K..':'..id..':cnt')
  local c = {}
  for i = 1, #all, 2 do
    local n = tonumber(all[i + 1])
    -- a count another program wrote that is no finite number: cjson cannot encode it
    if n and n >= 0 and n < math.huge then c[all[i]] = n end
  end
  return c
end
local function record(id, started, ended, c)
  redis.call('HSET', K..':runs', id, cjson.encode({run_id = tonumber(id), started_at = tonumber(started),
    ended_at = ended or false, counts = c}))
end
local MAX_RUN = 9007199254740992  -- 2^53, read_back.MAX_RUN
local function whole(v)  -- a run number read back, or nil
  local n = tonumber(v)
  if n and n >= 0 and n < MAX_RUN and n == math.floor(n) then return n end
  return nil
end
local function new_run()
  redis.call('DEL', K..':alive')
  -- the run sequence read back: one another program made no whole number (HINCRBY
  -- failed on it: no run could begin) restarts after the highest run recorded
  local seq = redis.call('HGET', K..':meta', 'runseq')
  local n, bad = whole(seq), ''
  if seq and not n then
    n, bad = 0, 'runseq'
    for _, rid in ipairs(redis.call('HKEYS', K..':runs')) do
      local r = whole(rid)
      if r and r > n then n = r end
    end
  end
  local id = (n or 0) + 1
  redis.call('HSET', K..':meta', 'runseq', id)
  redis.call('HSET', K..':run', 'id', id, 'started', now, 'ended', '')
  record(id, now, nil, {})
  return id, bad
end
local running = cur[1] and cur[3] == ''
if op == 'begin' then
  -- ARGV[3]: the job's partition count S this worker uses; kept for the job's life: the
  -- first start (or the first after a reset, which leaves the field empty) stores it; the
  -- reply's 6th element is the stored one
  local parts = redis.call('HGET', K..':run', 'parts')
  if not parts or parts == '' then
    redis.call('HSET', K..':run', 'parts', ARGV[3])
    parts = ARGV[3]
  end
  if running then return {'resumed', cur[1], cur[2], '', '', parts} end
  local old = cur[1] or ''
  local id, bad = new_run()
  return {'new', tostring(id), tostring(now), old, bad, parts}
elseif op == 'follow' then
  -- a partition other than 0 takes the run id of partition 0 (ARGV[3]); returns its old one
  local old = cur[1] or ''
  redis.call('HSET', K..':run', 'id', ARGV[3])
  return old
elseif op == 'finish' then
  if not cur[1] then return {} end
  if not running then return {'ended', cur[1], cur[2], cur[3]} end
  local c = counts(cur[1])
  -- ARGV[3]: the other partitions' counts (JSON), already found closed
  if ARGV[3] and ARGV[3] ~= '' then
    for k, v in pairs(cjson.decode(ARGV[3])) do c[k] = (c[k] or 0) + v end
  end
  if (c['pending'] or 0) + (c['delayed'] or 0) + (c['leased'] or 0) > 0 then return {} end
  redis.call('HSET', K..':run', 'ended', now)
  local clean = {}
  for _, k in ipairs({'pending', 'delayed', 'leased', 'done', 'failed'}) do clean[k] = c[k] or 0 end
  record(cur[1], cur[2], now, clean)
  return {'ended', cur[1], cur[2], tostring(now), cjson.encode(clean)}
elseif op == 'reopen' then
  -- ARGV[3]: the partition count, stored when the job has none yet (a seed before any
  -- worker started it); returns the run id, which the other partitions then take
  local parts = redis.call('HGET', K..':run', 'parts')
  if (not parts or parts == '') and ARGV[3] then redis.call('HSET', K..':run', 'parts', ARGV[3]) end
  if not cur[1] then return tostring(new_run()) end
  if not running then
    redis.call('HSET', K..':run', 'ended', '')
    record(cur[1], cur[2], nil, {})
  end
  return cur[1]
elseif op == 'reset' then
  if running then
    redis.call('HSET', K..':run', 'ended', now)
    record(cur[1], cur[2], now, {reset = 1})
  end
  for _, w in ipairs(redis.call('SMEMBERS', K..':seeds:takers')) do redis.call('DEL', K..':seeds:taken:'..w) end
  redis.call('DEL', K..':seeds', K..':seeds:takers', K..':workers', K..':alive')
  -- the job starts over: its next start may choose another partition count (an empty
  -- field: no count; a missing one is a job of an earlier version, one partition)
  redis.call('HSET', K..':run', 'parts', '')
  return cur[1] or ''
end
