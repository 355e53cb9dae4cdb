local K = KEYS[1]
local run = redis.call('HGET', K..':run', 'id')
if not run then return {''} end
local P = K..':'..run
local c = redis.call('HMGET', P..':cnt', 'pending', 'delayed', 'leased', 'done', 'failed')
local out = {run}
for i = 1, 5 do out[#out + 1] = c[i] or '0' end
out[#out + 1] = tostring(redis.call('HLEN', P..':dead'))
-- done-set buckets found of another type and replaced (someone else wrote the key)
out[#out + 1] = redis.call('HGET', P..':cnt', 'bad_done') or '0'
return out
