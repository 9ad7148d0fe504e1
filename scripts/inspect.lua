-- inspect: read a lock key's state in one atomic step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- KEYS[3]  wait queue of the lock key (same hash slot)
-- ARGV[1]  a token to look for, or "" (semaphores, read-write locks)
-- Returns {value, pttl, fence, waiters, holders}: the key's value and PTTL, the last fence
-- (false: none), how many are queued (the dead too) and hold it. For a sorted set: ARGV[1]
-- and its TTL if it holds, else the first live holder and the longest TTL.
local fence, queued = redis.call('GET', KEYS[2]), redis.call('ZCARD', KEYS[3])
local value = redis.pcall('GET', KEYS[1]) -- an error for a sorted set
if type(value) ~= 'table' then
  return {value, redis.call('PTTL', KEYS[1]), fence, queued, value and 1 or 0}
end
local any = redis.call('ZRANGE', KEYS[1], '0', '0')[1]
if any and string.sub(any, 1, 1) ~= '~' then -- a sorted set, not dlock's
  return redis.error_reply('WRONGTYPE dlock: the key holds a sorted set that is not a lock')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if ARGV[1] ~= '' then
  local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if exp and tonumber(exp) > now then
    return {ARGV[1], tonumber(exp) - now, fence, queued, live}
  end
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', '0', '1')[1]
if not first then
  return {false, -2, fence, queued, 0}
end
local last = redis.call('ZRANGE', KEYS[1], '-1', '-1', 'WITHSCORES')[2]
return {first, tonumber(last) - now, fence, queued, live}
