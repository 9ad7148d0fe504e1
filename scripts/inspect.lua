-- inspect: read a lock key's state in one atomic step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- KEYS[3]  wait queue of the lock key (same hash slot)
-- KEYS[4]  owner records of the lock key (same hash slot)
-- ARGV[1]  a token to look for, or "" (semaphores, read-write locks)
-- Returns {value, pttl, fence (false: none), queued (the dead too), holders, now_ms, owner
-- records}; for a sorted set, ARGV[1] and its TTL if it holds, else a live holder, longest TTL.
local fence, queued = redis.call('GET', KEYS[2]), redis.call('ZCARD', KEYS[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owners = {} -- only where WithOwner wrote: HVALS is in WithOwner's ACL alone
if redis.call('EXISTS', KEYS[4]) == 1 then
  owners = redis.call('HVALS', KEYS[4])
end
local function reply(value, pttl, held)
  return {value, pttl, fence, queued, held, now, owners}
end
local value = redis.pcall('GET', KEYS[1]) -- an error for a sorted set
if type(value) ~= 'table' then
  return reply(value, redis.call('PTTL', KEYS[1]), value and 1 or 0)
end
local any = redis.call('ZRANGE', KEYS[1], '0', '0')[1]
if any and string.sub(any, 1, 1) ~= '~' then -- a sorted set, not dlock's
  return redis.error_reply('WRONGTYPE dlock: the key holds a sorted set that is not a lock')
end
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if ARGV[1] ~= '' then
  local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if exp and tonumber(exp) > now then
    return reply(ARGV[1], tonumber(exp) - now, live)
  end
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', '0', '1')[1]
if not first then
  return reply(false, -2, 0)
end
local last = redis.call('ZRANGE', KEYS[1], '-1', '-1', 'WITHSCORES')[2]
return reply(first, tonumber(last) - now, live)
