-- pttl: the lock's remaining time to live, if it still holds this token.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
--
-- Returns the remaining TTL in milliseconds, or -3 when the key does not
-- hold the token. (-1, no expiry, cannot happen for a key dlock set.)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -3
end
return redis.call('PTTL', KEYS[1])
