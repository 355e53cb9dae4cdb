local now = tonumber(ARGV[1])
local out = {}
-- fingerprints this call already wrote or found: a plain request (no flag) for one of them
-- is a duplicate without a look (after any enqueue its record exists or it is done)
local SEEN = {}
-- one request, ARGV[i] to ARGV[i+15]: its result
local function one(i)
  local fp, data, dom, p = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  packed(fp, ARGV[i+14], ARGV[i+15])
  local nb, att, fc, fr, flag = tonumber(ARGV[i+4]), ARGV[i+5], ARGV[i+6], ARGV[i+7], ARGV[i+8]
  local held, hsecs, again, tail = ARGV[i+9], tonumber(ARGV[i+10]), ARGV[i+11], ARGV[i+12] == '1'
  local lease_tok = ARGV[i+13]  -- an update's lease token ('' when its worker holds none)
  local el = math.max(now, nb)
  local st = 0
  if el > now then st = 1 end
  local key = rk(fp)
  local cur = redis.call('HMGET', key, 'st', 'o', 'fc')
  if cur[1] and flag == 'r' and again ~= '' and tonumber(cur[1]) < 3 then
    -- dont_filter while the record is pending or leased: a record of its own
    fp, flag = again, ''
    SEEN[fp] = true
    key = rk(fp)
    cur = redis.call('HMGET', key, 'st', 'o', 'fc')
  end
  local res = 'duplicate'
  -- a done fingerprint has no record, only its place in the done set
  local done = (not cur[1]) and done_find(fp)
  -- an update with a lease token that passed on (the record was leased again, finished or
  -- failed since): refused like a late ack, so it neither reopens a record another worker
  -- finished nor takes away the lease another worker holds
  local stale = false
  if flag == 'u' and lease_tok ~= '' then
    if cur[1] then stale = tonumber(cur[1]) > 2 or redis.call('HGET', key, 't') ~= lease_tok
    else stale = done and true or false end
  end
  if stale then
    res = 'stale'
  elseif done and (held ~= '' or (flag ~= 'u' and flag ~= 'r')) then
    res = 'duplicate'
  elseif not cur[1] then
    local tok = 0
    if done then
      -- a retry or dont_filter of a done URL: a record again, with a token above any of its
      -- earlier record's, so a late repeat of an old ack stays stale
      done_del(fp, done)
      cnt('done', -1)
      tok = math.floor(now * 1000)
      if flag ~= 'u' then att = 0 end
    end
    -- the record in one write, its fields in the order they always had
    local f = {'d', data, 'dom', dom, 'p', p, 'a', att, 'enq', now, 't', tok}
    if el ~= now then f[#f + 1] = 'el' f[#f + 1] = el end  -- no el: eligible since enq
    if fc ~= '' then f[#f + 1] = 'fc' f[#f + 1] = fc f[#f + 1] = 'fr' f[#f + 1] = fr end
    if held ~= '' then
      -- kept in its worker's memory only: leased to it from the start (token 0)
      st = 2
      f[#f + 1] = 'o' f[#f + 1] = held f[#f + 1] = 'le' f[#f + 1] = now + hsecs
      redis.call('ZADD', P..':leases', now + hsecs, fp)
      redis.call('SADD', P..':wl:'..held, fp)
      redis.call('SADD', P..':owners', held)
    end
    f[#f + 1] = 'st' f[#f + 1] = st
    redis.call('HSET', key, unpack(f))
    move(nil, st)
    if not done then res = 'added' elseif flag == 'u' then res = 'updated' else res = 'reopened' end
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
  if res ~= 'duplicate' and res ~= 'stale' and st < 2 then
    if st == 1 then redis.call('ZADD', P..':delayed', el, fp) else push_ready(fp, p, dom, not tail) end
  end
  return res
end
for i = 2, #ARGV, 16 do
  if ARGV[i+8] == '' and SEEN[ARGV[i]] then
    out[#out + 1] = 'duplicate'
  else
    SEEN[ARGV[i]] = true
    out[#out + 1] = one(i)
  end
end
flush()
return out
