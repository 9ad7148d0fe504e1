-- shared_extend: reset a permit's or a read-write hold's expiry if this token still has it.
-- KEYS[1]  lock key: sorted set of the holders' tokens by expiry (ms)
-- KEYS[2]  holders' fences (hash)
-- KEYS[3]  fencing counter of the lock key
-- KEYS[4]  revoked holds of the lock key (hash: token -> why, from Client.Revoke)
-- ARGV[1]  token
-- ARGV[2]  new TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter at least, milliseconds
-- Returns 1 when extended, 0 NOT_HELD (an expired hold is not re-created) or why it was revoked.
local why = redis.call('HGET', KEYS[4], ARGV[1])
if why then
  return why
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(s) ~= 'string' or tonumber(s) <= now then -- expired, released, or another kind's key
  return 0
end
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], last)
redis.call('PEXPIREAT', KEYS[2], last)
return 1
