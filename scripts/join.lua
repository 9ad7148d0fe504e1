-- join: a waiter takes its place in the queue, or the lock if it is free and the waiter is
-- first in line; run again, it confirms a grant that reached the waiter too late to use.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; permits and read-write holds only)
-- ARGV[1]  token (its kind says what it asks for: prelude.lua, holders)
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  waiter id
-- ARGV[4]  the waiter's group (its Client's id)
-- ARGV[5]  this step's sequence number in the group
-- ARGV[6]  the waiter's place: its score from an earlier join, or 0 (new)
-- ARGV[7]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[8]  the lock key's wake channel
-- ARGV[9]  how long to keep the fencing counter, milliseconds (fence.go)
-- Returns {1, fence, px} when the waiter holds the lock for px ms, its whole TTL, from this
-- step; {0, 0, score} when it is queued (score: its place, to rejoin with).
local handoff, now, alive, _, h = queue(issue_fence)
local now_us = now()
local now_ms = math.floor(now_us / 1000)
local held, free, value = h.holds(KEYS[1], ARGV[1], now_ms)
if held then -- by a hand-off's claim: the waiter is alive (it sent this step): its whole TTL
  alive(KEYS[1], KEYS[3], KEYS[4], KEYS[2], ARGV[4], now_us, ARGV[5], value)
  local fence = h.fence_of(KEYS[2], KEYS[5], ARGV[1]) or issue_fence(KEYS[2], ARGV[9], nil, true)
  h.give(KEYS[1], KEYS[5], ARGV[1], tonumber(ARGV[2]), now_ms, fence)
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('HDEL', KEYS[4], ARGV[3])
  return {1, fence, tonumber(ARGV[2])}
end
-- Other kinds look at their holders: a kind error is raised here, before anything is written.
local room = free
if h.kind(ARGV[1]) ~= 'm' or not free and not value then
  room = h.fits(KEYS[1], KEYS[5], ARGV[1], now_ms)
end
local score = ARGV[6]
if score == '0' then
  score = string.format('%.0f', now_us)
end
if redis.call('ZADD', KEYS[3], 'NX', score, ARGV[3]) == 0 then
  score = redis.call('ZSCORE', KEYS[3], ARGV[3]) -- queued already: its place stands
end
redis.call('HSET', KEYS[4], ARGV[3], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. ARGV[9])
alive(KEYS[1], KEYS[3], KEYS[4], KEYS[2], ARGV[4], now_us, ARGV[5], value) -- after the ZADD
if room then -- the first live waiters get it, perhaps this one
  if redis.call('ZRANGE', KEYS[3], '0', '0')[1] == ARGV[3] then
    redis.call('ZREM', KEYS[3], ARGV[3])
    redis.call('HDEL', KEYS[4], ARGV[3])
    local fence = issue_fence(KEYS[2], ARGV[9], nil, true)
    h.give(KEYS[1], KEYS[5], ARGV[1], tonumber(ARGV[2]), now_ms, fence)
    return {1, fence, tonumber(ARGV[2])}
  end
  handoff(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[7], ARGV[8])
  if h.holds(KEYS[1], ARGV[1], now_ms) then -- alive, so its claim becomes the whole TTL
    local fence = h.fence_of(KEYS[2], KEYS[5], ARGV[1])
    h.give(KEYS[1], KEYS[5], ARGV[1], tonumber(ARGV[2]), now_ms, fence)
    return {1, fence, tonumber(ARGV[2])}
  end
end
return {0, 0, score}
