-- line: the prelude of acquire.lua and release.lua (wait.go puts it first in each):
-- their keys (KEYS[1] lock K, KEYS[2] fence counter F, KEYS[3] queue Q, KEYS[4]
-- waiter records W), the server's time, the line's head and the fence's issue.
local K, F, Q, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

-- head returns the first waiter of Q whose record is alive, and that record; dead
-- ones at the head are removed, at most 16 a call (then Q's head, unknown: nil record).
local function head()
  for _ = 1, 16 do
    local h = redis.call('ZRANGE', Q, 0, 0)[1]
    if not h then return nil end
    local rec = redis.call('HGET', W, h)
    local alive = rec and tonumber(string.match(rec, '^%S+ %S+ (%S+)')) -- nil: gone, or another format
    if alive and alive >= now_ms then return h, rec end
    redis.call('ZREM', Q, h)
    redis.call('HDEL', W, h)
  end
  return redis.call('ZRANGE', Q, 0, 0)[1], nil
end

-- issue_fence issues K's next fence, max(F + 1, server µs), keeping F keep_ms, and
-- returns it as a string: it grows by one per grant, and past a lost F with the clock.
local function issue_fence(keep_ms)
  local fence = string.format('%.0f', math.max(tonumber(redis.call('GET', F) or '0') + 1, now_us))
  redis.call('SET', F, fence, 'PX', keep_ms)
  return fence
end
