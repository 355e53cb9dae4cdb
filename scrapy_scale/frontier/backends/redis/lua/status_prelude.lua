local K = KEYS[1]
local RUN = redis.call('HGET', K..':run', 'id') or '0'
local P = K..':'..RUN
local function rk(fp) return P..':r:'..fp end
