-- release: leave the line, release the lock if it holds this token, and hand
-- it on: a mutex to the first live waiter (K set to its token for a claim, a
-- fence issued, a wake message naming it); a shared hold's room by a wake
-- message to the first waiter if its hold fits. A waiter that gives up runs it too.
-- (KEYS: fence.lua's and line.lua's, put first, with K, F, Q, W, H, WAKE, now_us, now_ms
-- and their functions)
-- ARGV[1]  token      ARGV[2]  claim_ms: how long the next waiter has to confirm
-- ARGV[3]  keep_ms    ARGV[4]  the caller's waiter id ('' for none)
-- ARGV[5]  the publish command, if not PUBLISH: SPUBLISH on Redis Cluster
-- ARGV[6]  the releaser's Client's waiter ids' prefix, to whom the key is handed over
--          (internal/wait/handover.go), or ''
-- Returns 1 RELEASED, 0 NOT_HELD, or "id fence": RELEASED, and handed over to waiter id.
local token, id, pub, mine = ARGV[1], ARGV[4], ARGV[5] or 'PUBLISH', ARGV[6] or ''

if id ~= '' then
  redis.call('ZREM', Q, id)
  redis.call('HDEL', W, id)
end
if string.byte(token) == 126 then -- a shared hold
  clock()
  local s = redis.pcall('ZSCORE', K, token)
  if type(s) ~= 'string' or tonumber(s) <= now_ms then -- not held (expired), or another kind's key
    if id ~= '' then wake_head(pub) end -- a waiter gone from the head may unblock the next
    return 0
  end
  redis.call('ZREM', K, token)
  redis.call('HDEL', H, token)
  expire()
  wake_head(pub)
  return 1
end
if redis.pcall('GET', K) ~= token then -- not held (or another kind's key)
  if id ~= '' then wake_head(pub) end -- a waiter gone from the head may unblock the next
  return 0
end
redis.call('DEL', K)
local h, rec = head()
if not rec then return 1 end
if string.byte(rec) == 126 then -- a shared waiter (the key changes kind): it takes it itself
  redis.call(pub, WAKE, h .. ' 0')
  return 1
end
local tok, ttl, keep = string.match(rec, '^(%S+) (%S+) %S+ %S+ (%S+)$')
if tok and mine ~= '' and string.sub(h, 1, #mine) == mine then -- the handover: the waiter's own TTL
  -- (at least the claim: should the reply that tells the waiter be lost, its next keepalive,
  -- within the claim, finds the key its own and confirms it)
  local fence = issue_fence(math.max(tonumber(keep), tonumber(ARGV[3])))
  redis.call('SET', K, tok, 'PX', math.max(tonumber(ttl), tonumber(ARGV[2])))
  redis.call('ZREM', Q, h)
  redis.call('HDEL', W, h)
  return h .. ' ' .. fence
end
local fence = issue_fence(ARGV[3])
redis.call('SET', K, string.match(rec, '^%S+'), 'PX', ARGV[2])
redis.call('HSET', W, h, (string.gsub(rec, '^(%S+ %S+ %S+) %S+', '%1 ' .. fence)))
redis.call(pub, WAKE, h .. ' ' .. fence)
return 1
