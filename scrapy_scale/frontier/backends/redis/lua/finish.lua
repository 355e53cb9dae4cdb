local worker, target = ARGV[1], tonumber(ARGV[2])
local n = 0
-- the leased records acked, taken off the lease set and their owners' sets in one command
-- each at the end (not one per record)
local unlease, owned = {}, {}
for i = 3, #ARGV, 6 do
  local fp, tok = ARGV[i], ARGV[i+1]
  packed(fp, ARGV[i+4], ARGV[i+5])
  local r = redis.call('HMGET', rk(fp), 'st', 't', 'o', 'fc')
  local st = tonumber(r[1])
  if st and st <= 2 and r[2] == tok then
    if target == 3 then
      -- done: only the fingerprint stays, in the done set
      if st == 2 then
        unlease[#unlease + 1] = fp
        if r[3] then
          local of = owned[r[3]]
          if not of then of = {} owned[r[3]] = of end
          of[#of + 1] = fp
        end
      else
        detach(fp, st, r[3], r[4])
      end
      cnt(NAMES[st], -1)
      cnt('done', 1)
      redis.call('DEL', rk(fp))
      done_add(fp)
    else
      detach(fp, st, r[3], r[4])
      move(st, target)
      redis.call('HDEL', rk(fp), 'o', 'le')
      local cls = ARGV[i+2]
      redis.call('HSET', rk(fp), 'st', target, 'fc', cls, 'fr', ARGV[i+3])
      redis.call('SADD', P..':failed:'..cls, fp)
      cnt('fail:'..cls, 1)
    end
    n = n + 1
  end
end
for i = 1, #unlease, 1000 do  -- unpack has a stack limit
  redis.call('ZREM', P..':leases', unpack(unlease, i, math.min(i + 999, #unlease)))
end
for owner, fps in pairs(owned) do
  for i = 1, #fps, 1000 do redis.call('SREM', P..':wl:'..owner, unpack(fps, i, math.min(i + 999, #fps))) end
end
flush()
return n
