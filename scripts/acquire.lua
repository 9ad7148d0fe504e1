-- acquire: a Redlock node's acquire: take the lock if it is free and issue its fence. (One
-- node's mutex has the line's: internal/wait.) (KEYS: internal/wait's fence.lua, put first,
-- with K, F and issue_fence)
-- KEYS[3]  notify key: exists while someone listens on the wake channel (all in K's slot)
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, ms: the TTL plus the fence margin (fence.go)
-- ARGV[4]  for a caller that will wait for the release message: how long to keep the notify key
-- Returns the fence (a string); or the holder's pttl (an integer; -1: no expiry). A key of
-- another kind is a WRONGTYPE error.
if redis.call('SET', K, ARGV[1], 'NX', 'PX', ARGV[2]) then
  return issue_fence(ARGV[3])
end
if redis.call('GET', K) == ARGV[1] then -- a re-run (go-redis retries on a broken connection)
  local last = redis.call('GET', F)
  if (tonumber(last) or 0) > 0 then return last end
  return issue_fence(ARGV[3]) -- the counter was lost: a new fence
end
if ARGV[4] then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
end
return redis.call('PTTL', K)
