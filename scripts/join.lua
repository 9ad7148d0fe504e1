-- join: a waiter takes its place in the queue, or takes the lock if it is
-- free and the waiter is first in line; run again, it confirms a grant
-- that reached the waiter too late to use as it was. (prelude.lua is
-- prepended.)
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  waiter id
-- ARGV[4]  the waiter's group (its Client's id)
-- ARGV[5]  this step's sequence number in the group
-- ARGV[6]  the waiter's place: its score from an earlier join, or 0 (new)
-- ARGV[7]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[8]  the lock key's wake channel
-- ARGV[9]  how long to keep the fencing counter, milliseconds (fence.go)
--
-- Returns {1, fence, px} when the waiter holds the lock: the key lives px
-- ms counted from this step (the waiter counts its lease from when it sent
-- it). Returns {0, pttl, score} when the waiter is queued: the holder's
-- remaining TTL and the waiter's place, to rejoin with.
local handoff, now, alive, claim_ms = queue(issue_fence)
local now_us = now()
alive(KEYS[3], KEYS[4], ARGV[4], now_us, ARGV[5])
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  -- Granted by a hand-off: give the key a full claim from this step. The
  -- counter holds the grant's fence: nothing issues another while the key
  -- holds our token (should it be gone, a new, higher fence will do).
  local px = tostring(math.min(tonumber(ARGV[2]), claim_ms))
  redis.call('PEXPIRE', KEYS[1], px)
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('HDEL', KEYS[4], ARGV[3])
  return {1, redis.call('GET', KEYS[2]) or issue_fence(KEYS[2], ARGV[9]), tonumber(px)}
end
local score = ARGV[6]
if score == '0' then
  score = string.format('%.0f', now_us)
end
redis.call('ZADD', KEYS[3], 'NX', score, ARGV[3])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. ARGV[9])
if not value then
  -- Free: the first live waiter gets it, which may be this one.
  if redis.call('ZRANGE', KEYS[3], '0', '0')[1] == ARGV[3] then
    redis.call('ZREM', KEYS[3], ARGV[3])
    redis.call('HDEL', KEYS[4], ARGV[3])
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {1, issue_fence(KEYS[2], ARGV[9]), tonumber(ARGV[2])}
  end
  if handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[7], ARGV[8]) == ARGV[3] then
    -- Everyone ahead was dead: the hand-off (claim_ms at most, from now)
    -- went to this waiter.
    return {1, redis.call('GET', KEYS[2]), tonumber(redis.call('PTTL', KEYS[1]))}
  end
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('ZSCORE', KEYS[3], ARGV[3])}
