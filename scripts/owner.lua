-- owner: keep a hold's owner record (WithOwner) beside its lock until its lease ends, or drop it.
-- KEYS[1]  the owner records of the lock key (hash), in its hash slot
-- ARGV[1]  the holder's id (a digest of its token, never the token)
-- ARGV[2]  the record (JSON), or '' to drop it
-- ARGV[3]  the hold's TTL from now, ms
-- Stores "<until_ms> <JSON>" (server time): readers skip holds that ended unreleased. Returns 0|1.
if ARGV[2] == '' then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
local t = redis.call('TIME')
local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', ends) .. ' ' .. ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
