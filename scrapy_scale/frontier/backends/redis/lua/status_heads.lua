-- The oldest eligible time among the ready records of a chunk of domains at priority p.
-- A queue holds the crawl's newest requests at its head and seeds at its tail, so its
-- oldest record may be anywhere: a short queue is read whole (exact), a long one up to the
-- first ready record from each end (then the answer is a lower bound of the age).
local p, start, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest = false
local exact = true
local bad = 0  -- eligible times that are no finite time >= 0 (written by another program)
local doms = redis.call('ZRANGE', P..':dq:'..p, start, start + n - 1)
-- the oldest of entries (all = true), or of the first ready one from the head (step 1) or
-- the tail (step -1)
local function look(entries, step, all)
  local a, b = 1, #entries
  if step < 0 then a, b = b, 1 end
  for i = a, b, step do
    local r = redis.call('HMGET', rk(qunpack(entries[i])), 'st', 'el', 'enq')
    if r[1] == '0' then
      local el = tonumber(r[2] or r[3])
      if el and not (el >= 0 and el < math.huge) then el = nil bad = bad + 1 end
      if el and (oldest == false or el < oldest) then oldest = el end
      if not all then return end
    end
  end
end
for _, dom in ipairs(doms) do
  local q = P..':q:'..p..':'..dom
  if redis.call('LLEN', q) <= 8 then look(redis.call('LRANGE', q, 0, -1), 1, true)
  else
    exact = false
    look(redis.call('LRANGE', q, 0, 19), 1, false)
    look(redis.call('LRANGE', q, -20, -1), -1, false)
  end
end
return cjson.encode({oldest = oldest, n = #doms, exact = exact, bad = bad})
