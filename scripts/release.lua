-- release: delete the lock only if it still holds this token, and wake
-- waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the lock key's wake channel (same hash slot as KEYS[1])
--
-- Returns 1 when released, 0 when the key does not hold the token (expired,
-- taken by someone else, or already released): then nothing is changed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], ARGV[3], 'released')
return 1
