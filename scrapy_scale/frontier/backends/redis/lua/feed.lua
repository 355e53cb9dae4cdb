-- The seed feed as a reliable queue (at least once). KEYS[1] = the job's prefix scale:{JOB};
-- every key below shares its hash tag (one Cluster slot).
--   take, worker, n: the worker's taken list when it still holds messages (a sync that
--     failed after taking them: they are written again, nothing new is popped), else up to
--     n messages from the head of the feed, appended to the worker's taken list (the worker
--     joins the takers). Returns the messages, in feed order.
--   done, worker: the worker wrote what it took: its taken list goes.
--   recover, now: every taken list of a worker not alive at now (no heartbeat in
--     K:alive, or its "last_beat until" has until < now) goes back to the head of the
--     feed in its order. Returns how many messages went back.
local K = KEYS[1]
local feed, takers = K..':seeds', K..':seeds:takers'
local op = ARGV[1]
local function taken(w) return K..':seeds:taken:'..w end
if op == 'take' then
  local w, n = ARGV[2], tonumber(ARGV[3])
  local t = taken(w)
  local old = redis.call('LRANGE', t, 0, -1)
  if #old > 0 then
    redis.call('SADD', takers, w)
    return old
  end
  local msgs = redis.call('LPOP', feed, n)
  if not msgs then return {} end
  for i = 1, #msgs, 1000 do  -- unpack has a stack limit
    redis.call('RPUSH', t, unpack(msgs, i, math.min(i + 999, #msgs)))
  end
  redis.call('SADD', takers, w)
  return msgs
elseif op == 'done' then
  redis.call('DEL', taken(ARGV[2]))
  redis.call('SREM', takers, ARGV[2])
  return 1
elseif op == 'recover' then
  local now = tonumber(ARGV[2])
  local moved = 0
  for _, w in ipairs(redis.call('SMEMBERS', takers)) do
    local beat = redis.call('HGET', K..':alive', w)
    local till = beat and tonumber(string.match(beat, '^%S+%s+(%S+)'))
    if not till or till < now then
      -- the tail first, each to the head: the list keeps its order in front of the feed
      while redis.call('LMOVE', taken(w), feed, 'RIGHT', 'LEFT') do moved = moved + 1 end
      redis.call('SREM', takers, w)
    end
  end
  return moved
end
return redis.error_reply('feed.lua: unknown op '..tostring(op))
