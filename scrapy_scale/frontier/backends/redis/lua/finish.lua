local worker, target = ARGV[1], tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV, 4 do
  local fp, tok = ARGV[i], ARGV[i+1]
  local r = redis.call('HMGET', rk(fp), 'st', 't', 'o', 'fc')
  local st = tonumber(r[1])
  if st and st <= 2 and r[2] == tok then
    detach(fp, st, r[3], r[4])
    if target == 3 then
      -- done: only the fingerprint stays, in the done set
      cnt(NAMES[st], -1)
      cnt('done', 1)
      redis.call('DEL', rk(fp))
      done_add(fp)
    else
      set_state(fp, st, target)
      redis.call('HDEL', rk(fp), 'o', 'le')
      local cls = ARGV[i+2]
      redis.call('HSET', rk(fp), 'fc', cls, 'fr', ARGV[i+3])
      redis.call('SADD', P..':failed:'..cls, fp)
      cnt('fail:'..cls, 1)
    end
    n = n + 1
  end
end
return n
