-- release: delete the lock only if it still holds this token, raise the
-- fencing counter to the holder's fence, and wake waiters.
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- ARGV[1]  token
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the lock key's wake channel (same hash slot as KEYS[1])
-- ARGV[4]  the holder's fence, or 0
-- ARGV[5]  how long the fencing counter outlives this write, milliseconds
--
-- Returns 1 when released, 0 when the key does not hold the token (expired,
-- taken by someone else, or already released): then nothing is changed.
--
-- Raising the counter matters for Redlock, where the holder's fence is the
-- maximum over several nodes: whoever wins this node next must get a higher
-- one (redlock.go has the argument). On one node the counter is already at
-- least the fence, and this changes nothing.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local fence = tonumber(ARGV[4])
if fence > 0 and (tonumber(redis.call('GET', KEYS[2])) or 0) < fence then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
end
redis.call(ARGV[2], ARGV[3], 'released')
return 1
