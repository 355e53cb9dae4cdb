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
