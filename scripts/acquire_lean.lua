-- acquire_lean: every uncontended lock, declaring two keys: take the lock if it is free and
-- issue its fence, but take nothing on a marked counter (mark.lua): acquire.lua follows.
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key (same hash slot)
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, ms: the TTL plus the fence margin (fence.go)
-- Returns one value, told apart by type (docs/design.md, "Measurements"): the fence (a string),
-- the holder's pttl (-1: no expiry), or MARKED (the key is free; only the counter changed, by
-- one unissued fence). A key of another kind is a WRONGTYPE error.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, marked = issue_fence(KEYS[2], ARGV[3])
  if not marked then
    return fence
  end
  redis.call('DEL', KEYS[1]) -- the key was free: this script made it
  return MARKED
end
-- (the slow path's functions: scripts.go)
return grant_again(KEYS[1], KEYS[2], ARGV[1], ARGV[3]) or redis.call('PTTL', KEYS[1])
