-- A guarded script: the caller's script (guard.go, NewGuardedScript), run
-- only with a fence at least the highest the record of its first key
-- holds, with the fence recorded; all in one step. NewGuardedScript puts
-- the caller's script first, as the function guarded(KEYS, ARGV), so that
-- it sees none of the locals below and its line numbers are its own; this
-- file and the prelude follow it. The caller's KEYS and ARGV come first;
-- the guard's follow them and are hidden from the caller's script, which
-- gets copies of its own as KEYS and ARGV.
--
-- KEYS[1..n]  the caller's keys; KEYS[1] is the resource
-- KEYS[n+1]   its record (same hash slot)
-- ARGV[1..m]  the caller's arguments
-- ARGV[m+1]   the fence (decimal, positive)
-- ARGV[m+2]   retention, milliseconds
local rec, fence, retention = KEYS[#KEYS], ARGV[#ARGV - 1], ARGV[#ARGV]
local refused = admitted(rec, fence)
if refused then
  return refused
end
-- Record the fence first, without expiry: whatever the caller's script
-- writes is then covered even if it fails midway; the expiry follows the
-- script, as for any write, whether it returns or raises.
redis.call('SET', rec, fence)
local keys, argv = {}, {}
for i = 1, #KEYS - 1 do
  keys[i] = KEYS[i]
end
for i = 1, #ARGV - 2 do
  argv[i] = ARGV[i]
end
-- pcall: a script that raises may have written already (Redis does not
-- roll a script back), so the record gets its expiry all the same, and
-- the error is raised after it.
local ok, reply = pcall(guarded, keys, argv)
record(KEYS[1], rec, fence, retention)
-- The caller's error is answered as the script alone would have answered
-- it: a server's error reply ("WRONGTYPE ...", the caller's own
-- {err = "CODE ..."}) as it is, a Lua error as ERR. One that reads like
-- the guard's refusal is the caller's words: prefixed, it cannot be taken
-- for a refused write.
local function as_reply(e)
  if type(e) == 'table' then
    e = e.err
  end
  e = tostring(e)
  if not string.find(e, '^%u+ ') or string.sub(e, 1, 11) == 'DLOCKSTALE ' then
    e = 'ERR ' .. e
  end
  return {err = e}
end
if not ok or type(reply) == 'table' and reply.err then
  return as_reply(reply)
end
return reply
