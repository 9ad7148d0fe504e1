-- A guarded script: the caller's script (guard.go, NewGuardedScript), run
-- only with a fence at least the highest the record of its first key
-- holds, and the fence recorded after it; all in one step. The caller's
-- KEYS and ARGV come first; the guard's follow them and are hidden from
-- the caller's script, which sees its own KEYS and ARGV as it would alone.
--
-- KEYS[1..n]  the caller's keys; KEYS[1] is the resource
-- KEYS[n+1]   its record (same hash slot)
-- ARGV[1..m]  the caller's arguments
-- ARGV[m+1]   the fence (decimal, positive)
-- ARGV[m+2]   retention, milliseconds
local guard_rec, guard_fence, guard_retention = KEYS[#KEYS], ARGV[#ARGV - 1], ARGV[#ARGV]
local guard_res = KEYS[1]
local refused = admitted(guard_rec, guard_fence)
if refused then
  return refused
end
local KEYS = { unpack(KEYS, 1, #KEYS - 1) }
local ARGV = { unpack(ARGV, 1, #ARGV - 2) }
local function guarded()
--CALLER--
end
local reply = guarded()
if type(reply) == 'table' and reply.err then
  return reply -- the caller's script refused its own write: nothing to record
end
record(guard_res, guard_rec, guard_fence, guard_retention)
return reply
