local K = KEYS[1]
local wid, expected, pid = ARGV[1], ARGV[2], ARGV[3]
local old = redis.call('HGET', K..':workers', wid) or ''
if old ~= expected then return 0 end
redis.call('HSET', K..':workers', wid, pid)
return 1
