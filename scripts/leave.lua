-- leave: a waiter gives up; a grant it got meanwhile goes on to the next (or is announced).
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; permits and read-write holds only)
-- ARGV[1]  token
-- ARGV[2]  waiter id
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the lock key's wake channel
-- Returns RELEASED when the waiter had been granted the lock, NOT_HELD otherwise.
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
local handoff, now, _, _, h = queue(issue_fence)
local now_ms = math.floor(now() / 1000)
if not h.holds(KEYS[1], ARGV[1], now_ms) then
  return NOT_HELD
end
h.drop(KEYS[1], KEYS[5], ARGV[1])
if handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[4]) == 0 then
  redis.call(ARGV[3], ARGV[4], 'released')
end
return RELEASED
