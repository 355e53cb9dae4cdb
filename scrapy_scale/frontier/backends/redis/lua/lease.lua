local now, worker, n, secs = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
promote(now)
local out = {}
local bad = {}
local left = n
local wait_sum, wait_n = 0, 0
-- the longest wait counted for one lease: an eligible time far in the past (another program
-- wrote it) must not make the sum infinite, which HINCRBYFLOAT refuses (every lease failed)
local MAX_WAIT = 31536000
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
        fp = qunpack(fp)
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
        if not r[4] then r[4] = r[3] end  -- no el: eligible since it was enqueued
        local el = tonumber(r[4])
        if now > el then wait_sum = wait_sum + math.min(now - el, MAX_WAIT) end
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
