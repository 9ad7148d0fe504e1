-- acquire_lean: take the lock if it is free, and issue its fencing token,
-- declaring the lock key and its counter only: the script of every
-- uncontended lock. (token.lua and fence.lua are prepended.) Whether anyone waits in the
-- key's queue, whom a newcomer must not overtake, it learns from the
-- counter's mark (mark.lua), which issue_fence reads anyway; on a marked
-- counter it takes nothing, and the caller runs acquire.lua, which looks
-- at the queue itself.
--
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, milliseconds: the TTL
--          plus the fence margin (fence.go)
--
-- Returns the fence (a decimal string, a bulk reply) when obtained, or an
-- integer when not: the holder's pttl when the key is taken (-1 when it
-- has no expiry, as a key set by hand without PX may have), or MARKED when the
-- key is free and the counter marked (nothing is changed but the counter,
-- raised by one unissued fence). The reply's type tells the two apart: one
-- value, not a table, because building and sending a table is more work
-- for the server on the uncontended path. A key that holds something other than a string (a
-- semaphore's sorted set) is a WRONGTYPE error; a key that already holds
-- this token (the request ran twice) is its fence.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, marked = issue_fence(KEYS[2], ARGV[3])
  if not marked then
    return fence
  end
  redis.call('DEL', KEYS[1]) -- the key was free: this script made it
  return MARKED
end
-- GET answers WRONGTYPE for a semaphore's or read-write lock's key (a
-- sorted set), and shows a grant to this very token: the same request run
-- twice (go-redis retries a command whose connection broke, and the first
-- run may have granted it) answers the grant again rather than "taken",
-- with the holder's mark (mark.lua) a waiter may have added since.
local value = redis.call('GET', KEYS[1])
if holds_token(value, ARGV[1]) then
  local last = redis.call('GET', KEYS[2]) -- perhaps marked: "+123" reads as 123
  if (tonumber(last) or 0) > 0 then
    return last
  end
  return (issue_fence(KEYS[2], ARGV[3]))
end
return redis.call('PTTL', KEYS[1])
