-- wait: one step of a queued waiter: take the lock if it is free and the
-- waiter is first in line, report a grant it may have missed, or (re)join
-- the queue and stay alive in it. (prelude.lua is prepended.)
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  this waiter's grant list
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  waiter id
-- ARGV[4]  how long the waiter counts as alive without another step, ms
-- ARGV[5]  this step's sequence number
--
-- Returns {1, fence, seq, px} when the waiter holds the lock: the grant's
-- fence, the sequence number of a step the server ran before the grant (the
-- waiter counts its lease from that step's send time), and the PX the key
-- was given. Returns {0, pttl} when the waiter is queued.
--
-- The first step of an uncontended Lock takes the first branch: nobody
-- queued and the lock free cost what TryLock's acquire costs.
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, issue_fence(KEYS[2]), tonumber(ARGV[5]), tonumber(ARGV[2])}
end
local handoff, now = queue(issue_fence)
local value = redis.call('GET', KEYS[1])
if not value then
  -- Free: the first live waiter gets it, which may be this one.
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head and head ~= ARGV[3] then
    handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
    value = redis.call('GET', KEYS[1])
  end
  if not value then
    if head then
      redis.call('ZREM', KEYS[3], ARGV[3])
      redis.call('HDEL', KEYS[4], ARGV[3])
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {1, issue_fence(KEYS[2]), tonumber(ARGV[5]), tonumber(ARGV[2])}
  end
end
if value == ARGV[1] then
  -- Granted by a handoff (this step's, or an earlier one whose grant the
  -- BLPOP has not collected yet).
  local grant = redis.call('LPOP', KEYS[5])
  redis.call('DEL', KEYS[5])
  if grant then
    local fence, seq, px = string.match(grant, '^(%d+) (%d+) (%d+)$')
    return {1, fence, tonumber(seq), tonumber(px)}
  end
  -- The grant record expired with its claim: the key's remaining TTL,
  -- counted from this step, is what is left.
  return {1, redis.call('GET', KEYS[2]), tonumber(ARGV[5]), redis.call('PTTL', KEYS[1])}
end
-- Taken: join the queue (keeping our place if already in it) and stay
-- alive. The queue keys outlive the last live waiter only briefly.
local now_ms, now_us = now()
redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[3])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. (now_ms + tonumber(ARGV[4])) .. ' ' .. ARGV[5])
redis.call('PEXPIRE', KEYS[3], 2 * tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[4], 2 * tonumber(ARGV[4]))
return {0, redis.call('PTTL', KEYS[1])}
