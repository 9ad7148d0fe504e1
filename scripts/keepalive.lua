-- keepalive: a step of a Client's waiters on a lock key: keep them alive, hand a lock that is
-- free (expired, deleted) or has room to the first live waiters, and report what was missed.
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
-- Returns {grant, missing}: grant, if the last hand-off went to this group, {id, held (1: the
-- key holds its token, else 0), fence, seq, lease_ms, px_ms}, else {}; missing: ids of the
-- roll call neither queued nor granted.
local handoff, now, alive, _, h = queue(issue_fence)
local now_us = now()
alive(KEYS[1], KEYS[3], KEYS[4], KEYS[2], ARGV[1], now_us, ARGV[2])
handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[4])
local now_ms = math.floor(now_us / 1000)
local grant, granted = {}, nil
local rec = redis.call('HGET', KEYS[4], '!')
if rec then
  local group, id, token, fence, seq, lease, px =
    string.match(rec, '^(%S+) (%S+) (%S+) (%d+) (%d+) (%d+) (%d+)$')
  if group == ARGV[1] then
    local held = h.holds(KEYS[1], token, now_ms) and 1 or 0
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
