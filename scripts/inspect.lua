-- inspect: read a lock key's state in one atomic step.
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key (same hash slot)
--
-- Returns {value, pttl, fence}: the key's value (false when absent), its
-- remaining TTL in milliseconds (-2 absent, -1 no expiry), and the last
-- fence issued for the key (false when none is remembered).
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
