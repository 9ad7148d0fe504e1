-- acquire: take the lock if it is free and nobody is queued for it, and
-- issue its fencing token. (fence.lua is prepended.)
--
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  notify key, only with ARGV[4]
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, milliseconds: the TTL
--          plus the fence margin (fence.go)
-- ARGV[4]  only when the caller will wait for the release message if the
--          key is taken: how long to keep the notify key, milliseconds
--          (absent otherwise: every argument costs the server a little on
--          every run, and most callers never listen)
--
-- Returns the fence (a decimal string, a bulk reply) when obtained, or the
-- holder's pttl (an integer reply) when the key is taken: -1 when the
-- holder's key has no expiry, as a key set by hand without PX may have,
-- and -2 when the key is free but waiters are queued for it (the queue's
-- next step hands it to the first of them, so a newcomer cannot jump the
-- line). The reply's type tells the two apart: one value, not a table,
-- because building and sending a table is more work for the server on the
-- uncontended path (node.go's acquire says what was measured).
-- A key that holds something other than a string (a semaphore's sorted
-- set) is a WRONGTYPE error; a key that already holds this token (the
-- request ran twice) is its fence. (If anything fails after the SET, the
-- caller releases the key: acquire.go.)
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return issue_fence(KEYS[2], ARGV[3])
end
-- GET answers WRONGTYPE for a semaphore's or read-write lock's key (a
-- sorted set), and shows a grant to this very token: the same request run
-- twice (go-redis retries a command whose connection broke, and the first
-- run may have granted it) answers the grant again rather than "taken".
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('GET', KEYS[2]) or issue_fence(KEYS[2], ARGV[3])
end
if ARGV[4] then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[4])
end
return redis.call('PTTL', KEYS[1])
