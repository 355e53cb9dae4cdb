local p, start, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest = false
local doms = redis.call('ZRANGE', P..':dq:'..p, start, start + n - 1)
for _, dom in ipairs(doms) do
  for _, fp in ipairs(redis.call('LRANGE', P..':q:'..p..':'..dom, 0, 20)) do
    local r = redis.call('HMGET', rk(fp), 'st', 'el')
    if r[1] == '0' then
      local el = tonumber(r[2])
      if el and (oldest == false or el < oldest) then oldest = el end
      break
    end
  end
end
return cjson.encode({oldest = oldest, n = #doms})
