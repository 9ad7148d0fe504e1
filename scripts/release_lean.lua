-- release_lean: release.lua's usual case, declaring one key instead of
-- six: delete the lock only if it holds this token without the holder's
-- mark (mark.lua: nobody waits or listens for the key). On the marked
-- token it changes nothing and answers WAITED, and the caller runs release.lua,
-- which hands the lock on (node.go, release) or clears a mark nobody
-- needs. It grants nothing, so only token.lua is prepended.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
--
-- Returns 1 when released, 0 when the key does not hold the token (as
-- release.lua: nothing is changed), and WAITED (2) when it holds the token marked
-- (nothing is changed). Any error but WRONGTYPE is raised, as in
-- release.lua.
local value = mutex_value(KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if value == ARGV[1] .. '+' then
  return WAITED
end
return 0 -- another holder, or another kind of lock
