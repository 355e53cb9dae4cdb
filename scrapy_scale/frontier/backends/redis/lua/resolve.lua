local n = 0
for i = 1, #ARGV do
  local fp = ARGV[i]
  local r = redis.call('HMGET', rk(fp), 'st', 'fc')
  if r[1] == '4' then
    detach(fp, 4, nil, r[2])
    set_state(fp, 4, 3)
    redis.call('HDEL', rk(fp), 'd', 'fc', 'fr')
    n = n + 1
  end
end
return n
