-- acquire: acquire_lean, but not while anyone is queued; for a caller that listens for the
-- release (Redlock, WithReplicaAck) or after acquire_lean found the counter marked.
-- KEYS[1]  lock key: set to the token with an expiry, only if absent
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  notify key: exists while someone listens on the wake channel
-- ARGV[1]  token
-- ARGV[2]  TTL, milliseconds
-- ARGV[3]  how long to keep the fencing counter, ms: the TTL plus the fence margin (fence.go)
-- ARGV[4]  for a caller that will wait for the release message: how long to keep the notify key
-- Returns as acquire_lean, but never MARKED, and pttl -2 when the key is free but waiters
-- are queued: the queue hands it to the first of them, so a newcomer cannot jump the line.
if redis.call('EXISTS', KEYS[3]) == 0
    and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence, marked = issue_fence(KEYS[2], ARGV[3])
  if marked then -- the queue is empty: the mark stays only while someone listens
    if redis.call('EXISTS', KEYS[4]) == 0 then
      set_mark(KEYS[2], false, nil, '+' .. fence)
    else -- someone listens: the holder's release must announce it
      mark_holder(KEYS[1], ARGV[1]) -- the value this script just set
    end
  end
  return fence
end
local fence, value = grant_again(KEYS[1], KEYS[2], ARGV[1], ARGV[3])
if fence then
  return fence
end
if ARGV[4] then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[4])
  keep_mark(KEYS[2], ARGV[4], KEYS[1], value)
end
return redis.call('PTTL', KEYS[1])
