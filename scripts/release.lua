-- release: delete the lock only if it still holds this token, raise the
-- fencing counter to the holder's fence, and hand the lock to the first
-- live waiter, or else announce that it is free to those who listen.
-- (prelude.lua is prepended.)
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; unused by a mutex, passed to handoff)
-- KEYS[6]  notify key: exists while someone waits (see below)
-- ARGV[1]  token
-- ARGV[2]  the holder's fence; 0 or absent: none
-- ARGV[3]  with a fence: how long to keep a raised fencing counter, ms
-- ARGV[4]  the publish command when it is not PUBLISH: SPUBLISH on Redis
--          Cluster
-- (An argument that is not needed is left out: each costs the server a
-- little on every run.)
--
-- The wake channel is the notify key's name with the wake prefix in place
-- of the notify prefix (keys.go derives both alike; a test holds them
-- together).
--
-- Returns 1 when released, 0 when the key does not hold the token (expired,
-- taken by someone else, or already released): then nothing is changed.
-- When the release handed the lock to a waiter, it returns the grant's
-- message instead of 1 (the one published, "g id fence seq lease_ms"), so
-- that a releaser whose Client holds that waiter can hand it over without
-- waiting for the message to come round (queue.go, handOver).
--
-- Raising the counter matters for Redlock, where the holder's fence is the
-- maximum over several nodes: whoever wins this node next must get a higher
-- one (redlock.go has the argument). On one node the counter is already at
-- least the fence, and this changes nothing.
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  if string.sub(value.err, 1, 9) == 'WRONGTYPE' then
    return 0 -- another kind of lock took the key: it holds nothing of ours
  end
  return value
end
if value ~= ARGV[1] then
  return 0
end
if ARGV[2] and ARGV[2] ~= '0' then
  local fence = tonumber(ARGV[2])
  if (tonumber(redis.call('GET', KEYS[2])) or 0) < fence then
    redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3]) -- kept as issue_fence keeps it
  end
end
-- The notify key exists while anyone waits for this key: a listener for
-- the release message (acquire.lua sets it when it refuses one) or a
-- queued waiter (every step of the queue keeps it as long as the queue:
-- prelude.lua, alive). Deleting it with the lock, in one call, tells
-- whether anyone waits; usually nobody does, and the release ends here.
if redis.call('DEL', KEYS[1], KEYS[6]) == 1 then
  return 1
end
-- A listener without a queue (a Redlock waiter, or a Lock that found the
-- key taken a moment ago) needs only the message, not the hand-off's
-- machinery: with the queue empty the hand-off would grant nobody. A
-- listener that finds the key taken again sets the notify key again.
local pub, chan = ARGV[4] or 'PUBLISH', 'dlock:wake:' .. string.sub(KEYS[6], 14)
local granted, msg = 0, nil
if redis.call('EXISTS', KEYS[3]) == 1 then
  local handoff, _, _, _, _, listened = queue(issue_fence)
  granted, msg = handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], pub, chan)
  listened(KEYS[6]) -- for the waiters the hand-off left queued
end
if granted == 0 then
  redis.call(pub, chan, 'released')
end
return msg or 1
