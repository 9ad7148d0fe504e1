-- release_lean: release.lua's usual case, declaring one key: delete the lock only if it
-- holds this token unmarked (mark.lua); on the marked token the caller runs release.lua.
-- KEYS[1]  lock key
-- ARGV[1]  token
-- Returns RELEASED, NOT_HELD or WAITED (held marked); the last two change nothing.
local value = redis.pcall('GET', KEYS[1]) -- an error reply for a key of another kind
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return RELEASED
end
if value == ARGV[1] .. '+' then
  return WAITED
end
-- (the slow path's functions: scripts.go)
mutex_value(KEYS[1]) -- raises GET's error but WRONGTYPE: another kind of lock
return NOT_HELD -- another holder, or another kind of lock
