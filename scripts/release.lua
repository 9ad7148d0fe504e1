-- release: a Redlock node's release: delete the lock if it holds this token, raise the
-- counter to the holder's fence, and announce it free to listeners. (One node's mutex has
-- the line's: internal/wait.)
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  notify key: exists while someone listens on the wake channel (all in K's slot)
-- ARGV[1]  token
-- ARGV[2]  the holder's fence; 0 or absent: none
-- ARGV[3]  with a fence: how long to keep a raised fencing counter, ms
-- ARGV[4]  the publish command when it is not PUBLISH: SPUBLISH on Redis Cluster
-- Returns 1 RELEASED, or 0 NOT_HELD (expired, taken, released, or a key of another kind:
-- nothing is changed).
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- A Redlock fence is the nodes' highest: whoever wins this node next must get a higher one.
if ARGV[2] and ARGV[2] ~= '0' and (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
-- One EXISTS: does anyone listen (docs/design.md, "Measurements")?
if redis.call('EXISTS', KEYS[3]) > 0 then
  local pub, chan = ARGV[4] or 'PUBLISH', 'dlock:wake:' .. string.sub(KEYS[3], 14) -- internal/keyspace
  redis.call(pub, chan, 'released')
end
return 1
