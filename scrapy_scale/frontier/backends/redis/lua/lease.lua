local now, worker, n, secs = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
promote(now)
local out = {}
local bad = {}
local left = n
local wait_sum, wait_n = 0, 0
-- the longest wait counted for one lease: an eligible time far in the past (another program
-- wrote it) must not make the sum infinite, which HINCRBYFLOAT refuses (every lease failed)
local MAX_WAIT = 31536000
local until_ = now + secs
-- the leases taken, added to the lease set and the worker's set in one command each at
-- the end (not one per record)
local zl, wl = {}, {}
local prios = redis.call('ZREVRANGE', P..':prios', 0, -1)
for _, p in ipairs(prios) do
  if left <= 0 then break end
  local dqk = P..':dq:'..p
  local active = redis.call('ZRANGE', dqk, 0, left - 1)
  -- the priority has no domain left only if it had none, or one was dropped below
  local maybe_empty = #active == 0
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
      local got, r = nil, nil
      while true do
        local fp = redis.call('LPOP', q)
        if not fp then break end
        fp = qunpack(fp)
        -- every field the lease reads, in one read
        r = redis.call('HMGET', rk(fp), 'st', 'p', 'dom', 'd', 'a', 'el', 'enq', 't', 'fc', 'fr')
        if r[1] == '0' and r[2] == p and r[3] == dom then
          local why = unreadable({r[4], r[5], r[6], r[7], r[8]})
          if not why then got = fp break end
          -- dead-lettered alone, with its reason; the rest of the batch goes on
          why = 'unreadable record: '..why
          to_dead(fp, why, now)
          bad[#bad + 1] = {fp, '', dom, p, '0', '0', '0', '0', '', '', why}
        end
      end
      if got then
        local key = rk(got)
        -- the token goes up by one (HINCRBY's arithmetic in Lua while it is exact: a token
        -- of 16 characters or more is left to HINCRBY), in the one write of the lease
        local t = r[8]
        if #t < 16 then
          t = tonumber(t) + 1
          redis.call('HSET', key, 't', string.format('%d', t), 'st', 2, 'o', worker, 'le', until_)
        else
          t = redis.call('HINCRBY', key, 't', 1)
          redis.call('HSET', key, 'st', 2, 'o', worker, 'le', until_)
        end
        move(0, 2)
        zl[#zl + 1] = until_
        zl[#zl + 1] = got
        wl[#wl + 1] = got
        local el = r[6] or r[7]  -- no el: eligible since it was enqueued
        local elt = tonumber(el)
        if now > elt then wait_sum = wait_sum + math.min(now - elt, MAX_WAIT) end
        wait_n = wait_n + 1
        out[#out + 1] = {got, r[4], dom, p, r[5], r[7], el, t, r[9] or '', r[10] or '', ''}
        left = left - 1
        if not seen[dom] then seen[dom] = true order[#order + 1] = dom end
        still[#still + 1] = dom
      else
        redis.call('ZREM', dqk, dom)
        dropped, maybe_empty = true, true
      end
    end
    if dropped and left > 0 then
      for _, d in ipairs(redis.call('ZRANGE', dqk, 0, left + #still - 1)) do
        if not considered[d] then considered[d] = true still[#still + 1] = d end
      end
    end
    active = still
  end
  if #order > 0 then
    -- each domain served goes behind the others: the service counter taken for all of
    -- them at once, their scores in one ZADD
    local s = redis.call('HINCRBY', P..':cnt', 'served', #order) - #order
    local z = {}
    for i, dom in ipairs(order) do z[#z + 1] = s + i z[#z + 1] = dom end
    for i = 1, #z, 1000 do redis.call('ZADD', dqk, 'XX', unpack(z, i, math.min(i + 999, #z))) end
  end
  if maybe_empty and redis.call('ZCARD', dqk) == 0 then redis.call('ZREM', P..':prios', p) end
end
if #wl > 0 then
  for i = 1, #zl, 1000 do redis.call('ZADD', P..':leases', unpack(zl, i, math.min(i + 999, #zl))) end
  for i = 1, #wl, 1000 do redis.call('SADD', P..':wl:'..worker, unpack(wl, i, math.min(i + 999, #wl))) end
  redis.call('SADD', P..':owners', worker)
end
if wait_n > 0 then
  redis.call('HINCRBYFLOAT', P..':cnt', 'wait_sum', wait_sum)
  cnt('wait_n', wait_n)
end
flush()
for _, row in ipairs(bad) do out[#out + 1] = row end
return out
