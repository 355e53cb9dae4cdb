-- enqueue.lua for plain new requests (seeds): ARGV = now, priority, then (fp, data, domain,
-- fp packed from its 1st and from its 2nd character: queue_entry.lua) per request. An
-- unknown fingerprint gets the record enqueue.lua writes (same fields, in the same order)
-- and joins its domain's ready queue; a known one is left alone.
-- Returns how many were added.
local now = tonumber(ARGV[1])
local p = ARGV[2]
local el = math.max(now, 0)
local added = 0
local seen = {}
for i = 3, #ARGV, 5 do
  local fp, dom = ARGV[i], ARGV[i+2]
  packed(fp, ARGV[i+3], ARGV[i+4])
  local key = rk(fp)
  if redis.call('HEXISTS', key, 'st') == 0 and not done_find(fp) then
    -- no el: eligible since it was enqueued (enq)
    redis.call('HSET', key, 'd', ARGV[i+1], 'dom', dom, 'p', p, 'a', '0', 'enq', el, 't', 0, 'st', 0)
    redis.call('RPUSH', P..':q:'..p..':'..dom, qpack(fp))
    if not seen[dom] then
      seen[dom] = true
      if not redis.call('ZSCORE', P..':dq:'..p, dom) then redis.call('ZADD', P..':dq:'..p, 0, dom) end
    end
    added = added + 1
  end
end
if added > 0 then
  cnt('pending', added)
  redis.call('ZADD', P..':prios', tonumber(p), p)
end
flush()
return added
