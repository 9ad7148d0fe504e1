-- acquire: take the lock if it is free and nobody is queued for it, and
-- issue its fencing token. (prelude.lua is prepended.)
--
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  notify key
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  when the caller will wait for the release message if the key
--          is taken: how long to keep the notify key, milliseconds; else 0
--
-- Returns {1, fence} when obtained (fence as a decimal string), or
-- {0, pttl} when the key is taken (pttl is -1 when the holder's key has no
-- expiry, as a key set by hand without PX may have).
--
-- Waiters queued for a free lock (the holder expired instead of releasing)
-- come first: the lock goes to the first live one, and the caller must
-- queue like everyone else. (If anything fails after the SET, the caller
-- releases the key: acquire.go.)
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  local handoff = queue(issue_fence)
  handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '0' then
    redis.call('SET', KEYS[5], '1', 'PX', ARGV[3])
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
return {1, issue_fence(KEYS[2])}
