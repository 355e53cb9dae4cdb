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
flush()
return n
