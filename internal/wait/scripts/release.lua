-- release: leave the line, release the lock if it holds this token, and hand
-- it to the first live waiter: K set to its token for a claim, a fence issued,
-- and a wake message naming it. A waiter that gives up runs it too.
-- KEYS[1]  lock K     KEYS[2]  fence counter F
-- KEYS[3]  queue Q    KEYS[4]  waiter records W (as in acquire.lua)
-- KEYS[5]  wake channel: the message is "id fence"
-- ARGV[1]  token      ARGV[2]  claim_ms: how long the next waiter has to confirm
-- ARGV[3]  keep_ms    ARGV[4]  the caller's waiter id ('' for none)
-- ARGV[5]  the publish command, if not PUBLISH: SPUBLISH on Redis Cluster
-- Returns {1, next waiter's id or ''} RELEASED, {0, ''} NOT_HELD.
-- (K, F, Q, W, now_us, now_ms, head and issue_fence: line.lua, put first)

if ARGV[4] ~= '' then
  redis.call('ZREM', Q, ARGV[4])
  redis.call('HDEL', W, ARGV[4])
end
if redis.pcall('GET', K) ~= ARGV[1] then return {0, ''} end -- another kind's key: not held
redis.call('DEL', K)
local h, rec = head()
if not rec then return {1, ''} end
local fence = issue_fence(ARGV[3])
redis.call('SET', K, string.match(rec, '^%S+'), 'PX', ARGV[2])
redis.call('HSET', W, h, string.match(rec, '^%S+ %S+ %S+') .. ' ' .. fence)
redis.call(ARGV[5] or 'PUBLISH', KEYS[5], h .. ' ' .. fence)
return {1, h}
