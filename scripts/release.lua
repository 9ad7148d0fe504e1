-- release: delete the lock if it holds this token, raise the counter to the holder's fence,
-- hand the lock on or announce it free, and clear the counter's mark if nobody waits or listens.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; unused by a mutex, passed to handoff)
-- KEYS[6]  notify key: exists while someone listens on the wake channel
-- ARGV[1]  token
-- ARGV[2]  the holder's fence; 0 or absent: none
-- ARGV[3]  with a fence: how long to keep a raised fencing counter, ms
-- ARGV[4]  the publish command when it is not PUBLISH: SPUBLISH on Redis Cluster
-- ARGV[5]  the releaser's group if it has waiters queued (ARGV[2..4] then given: '0', '0', PUBLISH)
-- ARGV[6]  with ARGV[5]: the group's step number for the joins, if any
-- ARGV[7..] each joining waiter of that group (queue_fold.go): token, TTL, id, counter's keep
-- Returns RELEASED, or NOT_HELD (expired, taken, or released: nothing is changed), or, for
-- a hand-off, its message "g id fence seq lease_ms px_ms" (unpublished if to ARGV[5]'s group).
-- With joins: {that answer, each joined waiter's score}; NOT_HELD joins nobody.
if not holds_token(mutex_value(KEYS[1]), ARGV[1]) then
  return NOT_HELD
end
local joined -- the scores of the waiters that joined, if any did
local handoff, now_us, t -- the queue's hand-off, and when, once the joins have built it
local function reply(r)
  if joined then
    return {r, unpack(joined)}
  end
  return r
end
if ARGV[7] then -- what the waiters' join.lua would do just before the release
  local now, alive
  handoff, now, alive = queue(issue_fence)
  now_us, t = now()
  local score = string.format('%.0f', now_us)
  joined = {}
  for i = 7, #ARGV, 4 do
    local id, s = ARGV[i + 2], score
    if redis.call('ZADD', KEYS[3], 'NX', s, id) == 0 then
      s = redis.call('ZSCORE', KEYS[3], id) -- queued already: its place stands
    end
    redis.call('HSET', KEYS[4], id,
      ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. ARGV[5] .. ' ' .. ARGV[i + 3])
    joined[#joined + 1] = s
  end
  alive(KEYS[1], KEYS[3], KEYS[4], KEYS[2], ARGV[5], now_us, ARGV[6], false, true)
end
redis.call('DEL', KEYS[1])
-- A Redlock fence is the nodes' highest: whoever wins this node next must get a higher one.
local counter -- the fencing counter's value, once read (false: absent)
if ARGV[2] and ARGV[2] ~= '0' then
  counter = redis.call('GET', KEYS[2])
  if (tonumber(counter) or 0) < tonumber(ARGV[2]) then
    local keep = ARGV[3] -- kept as issue_fence keeps it: marked, at least 3 s
    if string.byte(counter or '') == 43 then
      counter = '+' .. ARGV[2]
      if tonumber(keep) < 3000 then
        keep = '3000'
      end
    else
      counter = ARGV[2]
    end
    redis.call('SET', KEYS[2], counter, 'PX', keep)
  end
end
-- One EXISTS: does anyone wait or listen (docs/design.md, "Measurements")? After joins, yes.
if joined or redis.call('EXISTS', KEYS[3], KEYS[6]) > 0 then
  local pub, chan = ARGV[4] or 'PUBLISH', 'dlock:wake:' .. string.sub(KEYS[6], 14) -- internal/keyspace
  local granted, msg = (handoff or queue(issue_fence))(KEYS[1], KEYS[2], KEYS[3], KEYS[4],
    KEYS[5], pub, chan, true, ARGV[5], now_us, t)
  if granted == 0 then
    redis.call(pub, chan, 'released')
  end
  if msg then
    return reply(msg)
  end
else
  set_mark(KEYS[2], false, nil, counter)
end
return reply(RELEASED)
