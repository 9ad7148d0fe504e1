-- release: delete the lock if it holds this token, raise the counter to the holder's fence,
-- announce it free to listeners, and clear the counter's mark if nobody listens (Redlock's;
-- one node's is the line's: internal/wait).
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  notify key: exists while someone listens on the wake channel (all in K's slot)
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
-- One EXISTS: does anyone listen (docs/design.md, "Measurements")?
if redis.call('EXISTS', KEYS[3]) > 0 then
  local pub, chan = ARGV[4] or 'PUBLISH', 'dlock:wake:' .. string.sub(KEYS[3], 14) -- internal/keyspace
  redis.call(pub, chan, 'released')
else
  set_mark(KEYS[2], false, nil, counter)
end
return RELEASED
