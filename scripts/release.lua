-- release: delete the lock only if it still holds this token, raise the
-- fencing counter to the holder's fence, and hand the lock to the first
-- live waiter, or else announce that it is free to those who listen.
-- It also clears the counter's mark (mark.lua) when nobody waits or listens
-- any more, so that the next release can be lean. (token.lua, fence.lua,
-- mark.lua and prelude.lua are prepended.)
--
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter of the lock key
-- KEYS[3]  wait queue (sorted set)       all in the lock key's hash slot
-- KEYS[4]  waiters (hash)
-- KEYS[5]  holders' fences (hash; unused by a mutex, passed to handoff)
-- KEYS[6]  notify key: exists while someone listens on the wake channel
-- ARGV[1]  token
-- ARGV[2]  the holder's fence; 0 or absent: none
-- ARGV[3]  with a fence: how long to keep a raised fencing counter, ms
-- ARGV[4]  the publish command when it is not PUBLISH: SPUBLISH on Redis
--          Cluster
-- ARGV[5]  the group of the releaser's Client, when that Client has
--          waiters queued for the key (one node only): a grant to one of
--          them comes back in the reply and is not published (queue.go,
--          handOver). ARGV[2] to ARGV[4] are then given: '0', '0' and
--          PUBLISH when they are not needed.
-- ARGV[6]  with ARGV[5]: the group's step number for the joins that
--          follow, if any
-- ARGV[7..] four values for each waiter of that group that joins the
--          queue in this step (queue.go, joinFold): its token, TTL (ms),
--          waiter id, and how long to keep the fencing counter (ms)
-- (An argument that is not needed is left out: each costs the server a
-- little on every run.)
--
-- The wake channel is the notify key's name with the wake prefix in place
-- of the notify prefix (keys.go derives both alike; a test holds them
-- together).
--
-- Returns 1 when released, 0 when the key does not hold the token (expired,
-- taken by someone else, or already released): then nothing is changed.
-- When the release handed the lock to a waiter, it returns the grant's
-- message instead of 1 (the one published, "g id fence seq lease_ms px_ms"), so
-- that a releaser whose Client holds that waiter can hand it over without
-- waiting for the message to come round (queue.go, handOver).
-- With joins (ARGV[7..]), a release that releases returns a table
-- instead: that answer, then each joined waiter's score (its place in
-- line), in order. One that does not (0, or an error) joins nobody: the
-- waiters join themselves, and their join scripts look at the key.
--
-- Joining here, once the token is checked and before the key is
-- released, as join.lua would for a waiter that is not granted yet, is
-- what the waiters' own join scripts would have done just before this
-- release (queue.go, deferJoin): the hand-off below then finds them in
-- line. As one script the pair costs one run and one request less, on
-- the hand-off's path.
--
-- Raising the counter matters for Redlock, where the holder's fence is the
-- maximum over several nodes: whoever wins this node next must get a higher
-- one (redlock.go has the argument). On one node the counter is already at
-- least the fence, and this changes nothing.
if not holds_token(mutex_value(KEYS[1]), ARGV[1]) then
  return 0
end
local joined -- the scores of the waiters that joined, if any did
local handoff, now_us, t -- the queue's hand-off, and when, once the joins have built it
local function reply(r)
  if joined then
    return {r, unpack(joined)}
  end
  return r
end
if ARGV[7] then -- after the check: a release that does not release joins nobody
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
    redis.call('HSET', KEYS[4], id, ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. ARGV[5] .. ' ' .. ARGV[i + 3])
    joined[#joined + 1] = s
  end
  -- The hand-off below grants the lock, to one of them if nobody else
  -- is in line, so alive marks nothing (prelude.lua).
  alive(KEYS[1], KEYS[3], KEYS[4], KEYS[2], ARGV[5], now_us, ARGV[6], false, true)
end
redis.call('DEL', KEYS[1])
local counter -- the fencing counter's value, once read (false: absent)
if ARGV[2] and ARGV[2] ~= '0' then
  counter = redis.call('GET', KEYS[2])
  if (tonumber(counter) or 0) < tonumber(ARGV[2]) then
    -- Kept as issue_fence keeps it: a mark too, and a marked counter at
    -- least notifyWindow (fence.lua).
    local keep = ARGV[3]
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
-- Usually nobody waits, and one EXISTS says so for both kinds of waiter.
-- A listener without a queue (a Redlock waiter, or a Lock that found the
-- key taken a moment ago) needs only the message, not the hand-off's
-- machinery: with the queue empty the hand-off would grant nobody.
--
-- (Deleting the notify key with the lock, one DEL telling whether anyone
-- listens, was tried and taken back: a Redlock waiter whose turn comes
-- from its Client's new holder waits for the release without an attempt
-- that would set the key again, so releases went unannounced: a herd of
-- 300 goroutines on five nodes served 69 critical sections a second,
-- against 182-218 with this EXISTS.)
-- Past it, the hand-off looks at the queue itself (an absent one has no
-- first waiter), and knows the key is free: it has just been deleted.
-- After joins, the queue has someone live: no EXISTS is needed.
if joined or redis.call('EXISTS', KEYS[3], KEYS[6]) > 0 then
  local pub, chan = ARGV[4] or 'PUBLISH', 'dlock:wake:' .. string.sub(KEYS[6], 14)
  local granted, msg = (handoff or queue(issue_fence))(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], pub, chan, true, ARGV[5], now_us, t)
  if granted == 0 then
    redis.call(pub, chan, 'released')
  end
  if msg then
    return reply(msg)
  end
else
  set_mark(KEYS[2], false, nil, counter)
end
return reply(1)
