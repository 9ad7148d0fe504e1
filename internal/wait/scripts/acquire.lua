-- acquire: take the lock, wait in its line, or confirm a hand-off. A waiter's
-- re-run is also its keepalive; a re-run after a lost reply is answered the same.
-- (KEYS: fence.lua's and line.lua's, put first, with K, F, Q, W, H, WAKE, now_us, now_ms
-- and their functions)
-- ARGV[1]  token (a shared hold's starts with ~: line.lua's kind)
-- ARGV[2]  ttl_ms     ARGV[3]  keep_ms (F's life, >= ttl_ms)
-- ARGV[4]  waiter id  ARGV[5]  join: 1 to queue when not granted, 0 not to
-- ARGV[6]  alive_ms: the record is dead this long after this call
-- ARGV[7]  the publish command, if not PUBLISH: SPUBLISH on Redis Cluster
-- Returns the fence (a string): GRANTED; or wait_ms (an integer): QUEUED if join, else TAKEN.
-- wait_ms is K's PTTL (a shared hold's: until its first holder expires). A key of another
-- kind: an error.
local token, ttl, keep, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local shared = string.byte(token) == 126 -- '~'

local function dequeue()
  if ARGV[5] == '1' then
    redis.call('ZREM', Q, id)
    redis.call('HDEL', W, id)
  end
end

-- granted completes a shared hold's grant (fence: a new one's) and wakes the next
-- first waiter if its hold fits too (readers, permits).
local function granted(fence)
  dequeue()
  if redis.call('PTTL', F) < tonumber(keep) then redis.call('PEXPIRE', F, keep) end
  redis.call('ZADD', K, string.format('%.0f', now_ms + ttl), token)
  if fence then redis.call('HSET', H, token, fence) end
  expire()
  wake_head(ARGV[7] or 'PUBLISH')
  return fence or redis.call('HGET', H, token)
end

local function wait_ms()
  if not shared then return redis.call('PTTL', K) end
  local first = redis.call('ZRANGE', K, 0, 0, 'WITHSCORES')[2]
  return first and math.max(tonumber(first) - now_ms, 0) or -2
end

if not shared then
  local v = redis.call('GET', K)
  if v == token then -- mine: a hand-off, or a re-run after a lost reply
    redis.call('PEXPIRE', K, ttl)
    redis.call('PEXPIRE', F, keep)
    dequeue()
    return redis.call('GET', F)
  end
  if not v then
    local h = head()
    if not h or h == id then
      local fence = issue_fence(keep)
      redis.call('SET', K, token, 'PX', ttl)
      dequeue()
      return fence
    end
  end
else
  local ok, wrong = fits(token)
  if wrong then return {err = wrong} end
  local h = first()
  local s = redis.call('ZSCORE', K, token)
  if s and tonumber(s) > now_ms then return granted() end -- a re-run after a lost reply
  if ok and (not h or h == id) then return granted(issue_fence(keep)) end
end
if ARGV[5] ~= '1' then return wait_ms() end
clock()
local alive = tonumber(ARGV[6])
local last = redis.call('ZRANGE', Q, -1, -1, 'WITHSCORES')[2] -- arrivals in one µs keep their order
redis.call('ZADD', Q, 'NX', string.format('%.0f', math.max(now_us, (tonumber(last) or 0) + 1)), id)
redis.call('HSET', W, id, token .. ' ' .. ttl .. ' ' .. string.format('%.0f', now_ms + alive) .. ' 0 ' .. keep)
for _, k in ipairs({Q, W}) do
  if redis.call('PTTL', k) < alive then redis.call('PEXPIRE', k, alive) end
end
return wait_ms()
