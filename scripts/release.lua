-- release: delete the lock if it holds this token, raise the counter to the holder's fence,
-- hand the lock on or announce it free, and clear the counter's mark if nobody waits or listens.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; unused by a mutex, passed to handoff)
-- KEYS[6]  notify key: exists while someone listens on the wake channel
-- ARGV[1]  token
-- ARGV[2]  the holder's fence; 0 or absent: none
-- ARGV[3]  with a fence: how long to keep a raised fencing counter, ms
-- ARGV[4]  the publish command when it is not PUBLISH: SPUBLISH on Redis Cluster
-- Returns RELEASED, or NOT_HELD (expired, taken, or released: nothing is changed).
-- (A mutex on one node has the line's release: internal/wait; this one serves Redlock.)
if not holds_token(mutex_value(KEYS[1]), ARGV[1]) then
  return NOT_HELD
end
redis.call('DEL', KEYS[1])
-- A Redlock fence is the nodes' highest: whoever wins this node next must get a higher one.
local counter -- the fencing counter's value, once read (false: absent)
if ARGV[2] and ARGV[2] ~= '0' then
  counter = redis.call('GET', KEYS[2])
  if (tonumber(counter) or 0) < tonumber(ARGV[2]) then
    local keep = ARGV[3] -- kept as issue_fence keeps it: marked, at least 3 s
    if string.byte(counter or '') == 43 then
      counter = '+' .. ARGV[2]
      if tonumber(keep) < 3000 then
        keep = '3000'
      end
    else
      counter = ARGV[2]
    end
    redis.call('SET', KEYS[2], counter, 'PX', keep)
  end
end
-- One EXISTS: does anyone wait or listen (docs/design.md, "Measurements")?
if redis.call('EXISTS', KEYS[3], KEYS[6]) > 0 then
  local pub, chan = ARGV[4] or 'PUBLISH', 'dlock:wake:' .. string.sub(KEYS[6], 14) -- internal/keyspace
  local granted = queue(issue_fence)(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], pub, chan, true)
  if granted == 0 then
    redis.call(pub, chan, 'released')
  end
else
  set_mark(KEYS[2], false, nil, counter)
end
return RELEASED
