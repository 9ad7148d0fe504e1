-- shared_release: give back the permit or read-write hold this token has; hand the room on.
-- KEYS[1]  lock key: sorted set of the holders' tokens by expiry (ms)
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash)
-- ARGV[1]  token
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the lock key's wake channel
-- Returns RELEASED, or NOT_HELD (expired, or released: nothing is changed).
local handoff, now, _, _, h = queue(issue_fence)
local now_ms = math.floor(now() / 1000)
if not h.holds(KEYS[1], ARGV[1], now_ms) then
  return NOT_HELD
end
h.drop(KEYS[1], KEYS[5], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3])
end
return RELEASED
