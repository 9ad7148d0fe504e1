-- extend: reset the lock's expiry only if it still holds this token.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
-- ARGV[2]  new TTL, milliseconds
--
-- Returns 1 when extended, 0 when the key does not hold the token: then
-- nothing is changed (in particular, an expired lock is not re-created).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
