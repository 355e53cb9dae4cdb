local now = tonumber(ARGV[1])
local leases = {}
for _, w in ipairs(redis.call('SMEMBERS', P..':owners')) do
  local c = 0
  for _, fp in ipairs(redis.call('SMEMBERS', P..':wl:'..w)) do
    local r = redis.call('HMGET', rk(fp), 'st', 'le')
    if r[1] == '2' and (tonumber(r[2]) or 0) >= now then c = c + 1 end
  end
  if c > 0 then leases[w] = c end
end
local prios = {}
for _, p in ipairs(redis.call('ZREVRANGE', P..':prios', 0, -1)) do
  prios[#prios + 1] = {p, redis.call('ZCARD', P..':dq:'..p)}
end
return cjson.encode({leases = leases, dead = redis.call('HLEN', P..':dead'), prios = prios,
                     cnt = redis.call('HGETALL', P..':cnt')})
