-- keepalive: one step of a Client's group of waiters on a lock key. It
-- keeps the group alive, hands a lock that is free (its holder expired, or
-- it was deleted by hand), or has room, to the first live waiters, and reports what the
-- group may have missed. (prelude.lua is prepended.)
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; permits and read-write holds only)
-- ARGV[1]  the group (its Client's id)
-- ARGV[2]  this step's sequence number in the group
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the lock key's wake channel
-- ARGV[5…] waiter ids of the group to check (a roll call; may be none)
--
-- Returns {grant, missing}. grant is {} or, when the last hand-off went to
-- a waiter of this group, {id, held, fence, seq, lease_ms, px_ms}: held is 1 if
-- the key still holds that waiter's token, 0 if the grant is over. missing
-- lists the roll call's ids that are neither queued nor the last grant's.
local handoff, now, alive, _, h = queue(issue_fence)
local now_us = now()
alive(KEYS[1], KEYS[3], KEYS[4], KEYS[2], ARGV[1], now_us, ARGV[2])
handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[4]) -- if it is free, or has room
local now_ms = math.floor(now_us / 1000)
local grant, granted = {}, nil
local rec = redis.call('HGET', KEYS[4], '!')
if rec then
  local group, id, token, fence, seq, lease, px = string.match(rec, '^(%S+) (%S+) (%S+) (%d+) (%d+) (%d+) (%d+)$')
  if group == ARGV[1] then
    local held = 0
    if h.holds(KEYS[1], token, now_ms) then
      held = 1
    end
    grant, granted = {id, held, fence, tonumber(seq), tonumber(lease), tonumber(px)}, id
  end
end
local missing = {}
for i = 5, #ARGV do
  if ARGV[i] ~= granted and not redis.call('ZSCORE', KEYS[3], ARGV[i]) then
    missing[#missing + 1] = ARGV[i]
  end
end
return {grant, missing}
