-- fence: the prelude of every line script but fast_release.lua (wait.go puts it first):
-- the lock's key and fence counter, the server's time, and the fence's issue.
-- KEYS[1]  lock K: a mutex's token (string, PX the lease), or a semaphore's or
--          read-write lock's holders (sorted set: token -> expiry, server ms)
-- KEYS[2]  fence counter F (while a mutex holds K, F holds its holder's fence)
local K, F = KEYS[1], KEYS[2]

-- clock reads the server's time into now_us and now_ms, once a call: only the paths
-- that need it pay for TIME.
local now_us, now_ms
local function clock()
  if not now_us then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now_ms = math.floor(now_us / 1000)
  end
end

-- issue_fence issues K's next fence, max(F + 1, server µs), keeping F keep_ms, and
-- returns it as a string: it grows by one per grant, and past a lost F with the clock.
-- One SET ... GET when the clock is ahead of F, as it is unless grants come faster
-- than one a µs (then a second SET).
local function issue_fence(keep_ms)
  clock()
  local fence = string.format('%.0f', now_us)
  local old = tonumber(redis.call('SET', F, fence, 'PX', keep_ms, 'GET'))
  if old and old >= now_us then
    fence = string.format('%.0f', old + 1)
    redis.call('SET', F, fence, 'PX', keep_ms)
  end
  return fence
end
