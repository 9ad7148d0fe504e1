-- release_lean: release.lua's usual case, declaring one key: delete the lock only if it
-- holds this token unmarked (mark.lua); on the marked token the caller runs release.lua.
-- KEYS[1]  lock key
-- ARGV[1]  token
-- Returns RELEASED, NOT_HELD or WAITED (held marked); the last two change nothing. A key of
-- another kind is a WRONGTYPE error: the caller runs release.lua, which answers NOT_HELD.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return RELEASED
end
if value == ARGV[1] .. '+' then
  return WAITED
end
return NOT_HELD -- another holder
