-- acquire: take the lock if it is free and nobody is queued for it, and
-- issue its fencing token; for a caller that listens for release messages
-- (Redlock, WithReplicaAck), or after acquire_lean found the counter
-- marked (mark.lua). (token.lua, fence.lua and mark.lua are prepended.)
--
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  notify key: exists while someone listens on the wake channel
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, milliseconds: the TTL
--          plus the fence margin (fence.go)
-- ARGV[4]  only when the caller will wait for the release message if the
--          key is taken: how long to keep the notify key, milliseconds
--          (absent otherwise: every argument costs the server a little on
--          every run, and most callers never listen)
--
-- Returns the fence (a decimal string) when obtained, or the holder's pttl
-- (an integer) when the key is taken: -1 when the holder's key has no
-- expiry, and -2 when the key is free but waiters are queued for it (the
-- queue's next step hands it to the first of them, so a newcomer cannot
-- jump the line). As acquire_lean, a key of another kind is a WRONGTYPE
-- error, and a key that already holds this token is its fence.
--
-- The marks (mark.lua) are kept right here: on a grant the queue is empty,
-- so the counter's mark stays only while someone listens, and then the new
-- holder gets its own; a caller that listens sets both and keeps the
-- counter's as long as the notify key.
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, marked = issue_fence(KEYS[2], ARGV[3])
  if marked then
    if redis.call('EXISTS', KEYS[4]) == 0 then
      set_mark(KEYS[2], false, nil, '+' .. fence)
    else -- someone listens: the holder's release must announce it
      mark_holder(KEYS[1], ARGV[1]) -- the value this script just set
    end
  end
  return fence
end
-- The same request run twice: its grant again, as in acquire_lean.lua.
local value = redis.call('GET', KEYS[1])
if holds_token(value, ARGV[1]) then
  local last = redis.call('GET', KEYS[2]) -- perhaps marked: "+123" reads as 123
  if (tonumber(last) or 0) > 0 then
    return last
  end
  return (issue_fence(KEYS[2], ARGV[3]))
end
if ARGV[4] then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[4])
  keep_mark(KEYS[2], ARGV[4], KEYS[1], value)
end
return redis.call('PTTL', KEYS[1])
