-- release_lean: release.lua's usual case, declaring two keys instead of
-- six: delete the lock only if it still holds this token and its counter
-- is not marked (mark.lua: nobody waits or listens for the key). On a
-- marked counter it changes nothing and answers 2, and the caller runs
-- release.lua, which hands the lock on (node.go, release) or clears a mark
-- nobody needs. It grants nothing, so fence.lua is not prepended.
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- ARGV[1]  token
--
-- Returns 1 when released, 0 when the key does not hold the token (as
-- release.lua: nothing is changed), and 2 when the counter is marked
-- (nothing is changed). Any error but WRONGTYPE is raised, as in
-- release.lua.
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' then
  if string.sub(value.err, 1, 9) == 'WRONGTYPE' then
    return 0 -- another kind of lock took the key: it holds nothing of ours
  end
  return value
end
if value ~= ARGV[1] then
  return 0
end
if string.byte(redis.call('GET', KEYS[2]) or '') == 43 then
  return 2
end
redis.call('DEL', KEYS[1])
return 1
