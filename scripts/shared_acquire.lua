-- shared_acquire: take a permit or read-write hold, with its fence, if it fits and none wait.
-- KEYS[1]  lock key: sorted set of the holders' tokens by expiry (ms)
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash; unused: the keys are the queue scripts')
-- KEYS[5]  holders' fences (hash)
-- ARGV[1]  token (its kind says what it asks for)
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, milliseconds (fence.go)
-- Returns {1, fence}, or {0, wait_ms}: until the soonest holder's expiry, -2 if waiters are
-- queued (they go first). A key of another kind is an error.
local h = holders()
local now = h.now_ms()
if h.holds(KEYS[1], ARGV[1], now) then -- the same request run twice (acquire.lua)
  return {1, h.fence_of(KEYS[2], KEYS[5], ARGV[1])}
end
local room = h.fits(KEYS[1], KEYS[5], ARGV[1], now)
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, -2}
end
if not room then
  return {0, h.wait_ms(KEYS[1], now)}
end
local fence = issue_fence(KEYS[2], ARGV[3])
h.give(KEYS[1], KEYS[5], ARGV[1], tonumber(ARGV[2]), now, fence)
return {1, fence}
