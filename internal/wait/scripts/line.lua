-- line: the prelude of acquire.lua and release.lua, after fence.lua (wait.go puts them
-- first in each): the line's keys (the same six for both: fence.lua's, then these), the
-- line's head, and a shared hold's rules.
-- KEYS[3]  queue Q (sorted set: waiter id -> arrival, server µs, unique)
-- KEYS[4]  waiter records W (hash: id -> "token ttl_ms alive_until_ms fence keep_ms")
-- KEYS[5]  shared holders' fences H (hash: token -> fence)
-- KEYS[6]  wake channel: a message "id fence" names the waiter to try (fence 0: a shared hold)
local Q, W, H, WAKE = KEYS[3], KEYS[4], KEYS[5], KEYS[6]

-- head returns the first waiter of Q whose record is alive, and that record. Dead
-- ones at the head (a crashed process's waiters, say) are removed, in batches of 64,
-- at most 1024 a call (then Q's head, unknown: nil record).
local function alive(rec)
  clock()
  local until_ms = rec and tonumber(string.match(rec, '^%S+ %S+ (%S+)')) -- nil: gone, or another format
  return until_ms and until_ms >= now_ms
end
local function head()
  local h = redis.call('ZRANGE', Q, 0, 0)[1]
  if not h then return nil end
  local rec = redis.call('HGET', W, h)
  if alive(rec) then return h, rec end
  for _ = 1, 16 do
    local ids = redis.call('ZRANGE', Q, 0, 63)
    if #ids == 0 then return nil end
    local recs, dead = redis.call('HMGET', W, unpack(ids)), {}
    for i, id in ipairs(ids) do
      if alive(recs[i]) then h, rec = id, recs[i] break end
      dead[#dead + 1] = id
    end
    if #dead > 0 then
      redis.call('ZREM', Q, unpack(dead))
      redis.call('HDEL', W, unpack(dead))
    end
    if rec and alive(rec) then return h, rec end
  end
  return redis.call('ZRANGE', Q, 0, 0)[1], nil
end

-- kind is a shared token's: 's' (a permit, with the semaphore's permits), 'r' or 'w'.
local function kind(token)
  local k, n = string.match(token, '^~([srw])(%d*)~')
  return k, tonumber(n)
end

-- expire keeps K and H until K's last holder expires.
local function expire()
  local last = redis.call('ZRANGE', K, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', K, last)
    redis.call('PEXPIREAT', H, last)
  end
end

-- fits reports whether a shared token's hold fits beside K's live holders (expired
-- ones purged), or, second, the error that says it never can.
local function fits(token)
  clock()
  local k, n = kind(token)
  local gone = redis.pcall('ZRANGEBYSCORE', K, '-inf', now_ms)
  if gone.err then return false, 'WRONGTYPE dlock: the key holds another kind of lock' end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', K, '-inf', now_ms)
    redis.call('HDEL', H, unpack(gone))
    expire()
  end
  local count = redis.call('ZCARD', K)
  if count == 0 then return true end
  local fk, fn = kind(redis.call('ZRANGE', K, 0, 0)[1] or '')
  if not fk or (k == 's') ~= (fk == 's') then
    return false, 'WRONGTYPE dlock: the key holds another kind of lock'
  end
  if k == 's' then
    if n ~= fn then return false, 'DLOCKPERMITS ' .. fn end
    return count < n
  end
  return k == 'r' and fk == 'r'
end

-- first is head, but a shared waiter whose hold never fits the key (another kind,
-- other permits) is dropped from the line: its own acquire tells it why.
local function first()
  for _ = 1, 16 do
    local h, rec = head()
    if not rec or string.byte(rec) ~= 126 then return h, rec end
    local _, wrong = fits(string.match(rec, '^%S+'))
    if not wrong then return h, rec end
    redis.call('ZREM', Q, h)
    redis.call('HDEL', W, h)
  end
  return head()
end

-- wake_head names the line's first live waiter on the wake channel if it can take
-- the key now (a mutex: K is free; a shared hold: it fits), which its acquire then does.
local function wake_head(pub)
  local h, rec = first()
  if not rec then return end
  local tok = string.match(rec, '^%S+')
  local ok
  if string.byte(tok) == 126 then ok = fits(tok) else ok = redis.call('EXISTS', K) == 0 end
  if ok then redis.call(pub, WAKE, h .. ' 0') end
end
