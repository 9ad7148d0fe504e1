-- extend: reset the lock's expiry only if it still holds this token, and keep its fencing
-- counter at least the new TTL plus the fence margin (fence.go: it outlives the lock).
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- KEYS[3]  revoked holds of the lock key (hash: token -> why, from Client.Revoke)
-- ARGV[1]  token
-- ARGV[2]  new TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter at least, milliseconds
-- Returns 1 when extended, 0 NOT_HELD (an expired lock, or a key of another kind, is not
-- re-created) or why it was revoked.
local why = redis.call('HGET', KEYS[3], ARGV[1])
if why then
  return why
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
