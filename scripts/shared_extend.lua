-- shared_extend: reset a permit's or a read-write hold's expiry if this token still has it.
-- KEYS[1]  lock key: sorted set of the holders' tokens by expiry (ms)
-- KEYS[2]  holders' fences (hash)
-- KEYS[3]  fencing counter of the lock key
-- KEYS[4]  revoked holds of the lock key (hash: token -> why, from Client.Revoke)
-- ARGV[1]  token
-- ARGV[2]  new TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter at least, milliseconds
-- Returns 1 when extended, NOT_HELD (an expired hold is not re-created) or why it was revoked.
local why = redis.call('HGET', KEYS[4], ARGV[1])
if why then
  return why
end
local h = holders()
local now = h.now_ms()
if not h.holds(KEYS[1], ARGV[1], now) then
  return NOT_HELD
end
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
h.expire(KEYS[1], KEYS[2])
return 1
