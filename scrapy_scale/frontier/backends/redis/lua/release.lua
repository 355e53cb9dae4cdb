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
flush()
return n
