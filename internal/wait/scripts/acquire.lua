-- acquire: take the lock, wait in its line, or confirm a hand-off. A waiter's
-- re-run is also its keepalive; a re-run after a lost reply is answered the same.
-- KEYS[1]  lock K (value: the holder's token)
-- KEYS[2]  fence counter F (while K is set, F holds its holder's fence)
-- KEYS[3]  queue Q (sorted set: waiter id -> arrival, server µs, unique)
-- KEYS[4]  waiter records W (hash: id -> "token ttl_ms alive_until_ms fence")
-- ARGV[1]  token      ARGV[2]  ttl_ms     ARGV[3]  keep_ms (F's life, >= ttl_ms)
-- ARGV[4]  waiter id  ARGV[5]  join: 1 to queue when not granted, 0 not to
-- ARGV[6]  alive_ms: the record is dead this long after this call
-- Returns {1, fence} GRANTED, {2, K's PTTL} QUEUED, {3, K's PTTL} TAKEN.
-- (K, F, Q, W, now_us, now_ms, head and issue_fence: line.lua, put first)
local token, ttl, keep, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local function granted()
  if ARGV[5] == '1' then
    redis.call('ZREM', Q, id)
    redis.call('HDEL', W, id)
  end
  redis.call('PEXPIRE', F, keep)
  return {1, redis.call('GET', F)}
end

if redis.call('GET', K) == token then -- mine: a hand-off, or a re-run after a lost reply
  redis.call('PEXPIRE', K, ttl)
  return granted()
end
local h = head()
if redis.call('EXISTS', K) == 0 and (not h or h == id) then
  issue_fence(keep)
  redis.call('SET', K, token, 'PX', ttl)
  return granted()
end
if ARGV[5] ~= '1' then return {3, redis.call('PTTL', K)} end
local alive = tonumber(ARGV[6])
local last = redis.call('ZRANGE', Q, -1, -1, 'WITHSCORES')[2] -- arrivals in one µs keep their order
redis.call('ZADD', Q, 'NX', string.format('%.0f', math.max(now_us, (tonumber(last) or 0) + 1)), id)
redis.call('HSET', W, id, token .. ' ' .. ttl .. ' ' .. string.format('%.0f', now_ms + alive) .. ' 0')
for _, k in ipairs({Q, W}) do
  if redis.call('PTTL', k) < alive then redis.call('PEXPIRE', k, alive) end
end
return {2, redis.call('PTTL', K)}
