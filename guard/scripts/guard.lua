-- guard: write to a resource only with a fence at least the highest its
-- record holds, and record the fence; all in one step (guard.go).
--
-- KEYS[1]  the resource
-- KEYS[2]  its record (same hash slot)
-- ARGV[1]  the fence (decimal, positive)
-- ARGV[2]  retention, milliseconds
-- ARGV[3]  the write: "set" (ARGV[4] value, ARGV[5] TTL ms or 0),
--          "hset" (ARGV[4..] field, value pairs) or "del"
--
-- Returns the write's own reply, or an error "DLOCKSTALE <highest>" when a
-- higher fence has written: then nothing is changed.
local res, rec, fence = KEYS[1], KEYS[2], ARGV[1]
local refused = admitted(rec, fence)
if refused then
  return refused
end
local reply
if ARGV[3] == 'set' then
  if ARGV[5] ~= '0' then
    reply = redis.call('SET', res, ARGV[4], 'PX', ARGV[5])
  else
    reply = redis.call('SET', res, ARGV[4])
  end
elseif ARGV[3] == 'hset' then
  reply = 0 -- in chunks: unpack has a limit of a few thousand values
  for i = 4, #ARGV, 1000 do
    reply = reply + redis.call('HSET', res, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
else
  reply = redis.call('DEL', res)
end
record(res, rec, fence, ARGV[2])
return reply
