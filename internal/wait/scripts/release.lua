-- release: leave the line, release the lock if it holds this token, and hand
-- it on: a mutex to the first live waiter (K set to its token for a claim, a
-- fence issued, a wake message naming it); a shared hold's room by a wake
-- message to the first waiter if its hold fits. A waiter that gives up runs it too.
-- (KEYS: line.lua's, put first, with K, F, Q, W, H, WAKE, now_us, now_ms and its functions)
-- ARGV[1]  token      ARGV[2]  claim_ms: how long the next waiter has to confirm
-- ARGV[3]  keep_ms    ARGV[4]  the caller's waiter id ('' for none)
-- ARGV[5]  the publish command, if not PUBLISH: SPUBLISH on Redis Cluster
-- Returns {1, next waiter's id or ''} RELEASED, {0, ''} NOT_HELD.
local pub = ARGV[5] or 'PUBLISH'
if ARGV[4] ~= '' then
  redis.call('ZREM', Q, ARGV[4])
  redis.call('HDEL', W, ARGV[4])
end
if string.byte(ARGV[1]) == 126 then -- a shared hold
  clock()
  local s = redis.pcall('ZSCORE', K, ARGV[1])
  if type(s) ~= 'string' or tonumber(s) <= now_ms then -- not held (expired), or another kind's key
    if ARGV[4] ~= '' then wake_head(pub) end -- a waiter gone from the head may unblock the next
    return {0, ''}
  end
  redis.call('ZREM', K, ARGV[1])
  redis.call('HDEL', H, ARGV[1])
  expire()
  wake_head(pub)
  return {1, ''}
end
if redis.pcall('GET', K) ~= ARGV[1] then -- not held (or another kind's key)
  if ARGV[4] ~= '' then wake_head(pub) end -- a waiter gone from the head may unblock the next
  return {0, ''}
end
redis.call('DEL', K)
local h, rec = head()
if not rec then return {1, ''} end
if string.byte(rec) == 126 then -- a shared waiter (the key changes kind): it takes it itself
  redis.call(pub, WAKE, h .. ' 0')
  return {1, ''}
end
local fence = issue_fence(ARGV[3])
redis.call('SET', K, string.match(rec, '^%S+'), 'PX', ARGV[2])
redis.call('HSET', W, h, string.match(rec, '^%S+ %S+ %S+') .. ' ' .. fence)
redis.call(pub, WAKE, h .. ' ' .. fence)
return {1, h}
