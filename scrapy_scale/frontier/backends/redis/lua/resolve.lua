local n = 0
for i = 1, #ARGV do
  local fp = ARGV[i]
  local r = redis.call('HMGET', rk(fp), 'st', 'fc')
  if r[1] == '4' then
    detach(fp, 4, nil, r[2])
    cnt('failed', -1)
    cnt('done', 1)
    redis.call('DEL', rk(fp))
    done_add(fp)
    n = n + 1
  end
end
flush()
return n
