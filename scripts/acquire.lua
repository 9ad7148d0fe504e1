-- acquire: take the lock if it is free, and issue its fencing token.
--
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long the fencing counter outlives its last grant, milliseconds
--
-- Returns {1, fence} when obtained (fence as a decimal string), or
-- {0, pttl} when the key is taken (pttl is -1 when the holder's key has no
-- expiry, as a key set by hand without PX may have).
--
-- The counter is read before anything is written: if reading it fails
-- (WRONGTYPE), the script stops before it could leave a lock behind.
local last = redis.call('GET', KEYS[2])
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- The fence is max(last + 1, server time in microseconds): it grows by at
-- least one per grant while the counter survives, and it keeps growing when
-- the counter is lost (restart without persistence, FLUSHALL, failover to a
-- replica that never saw it) as long as the server clock has moved past the
-- last fence. Microseconds since 1970 stay below 2^53, so Lua's doubles hold
-- them exactly; %.0f prints them without an exponent.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = string.format('%.0f', math.max((tonumber(last) or 0) + 1, now))
redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
return {1, fence}
