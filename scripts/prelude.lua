-- prelude: functions shared by the scripts that grant locks. It is
-- prepended to acquire, release, join, keepalive and leave (scripts.go); it
-- declares functions only and runs nothing.
--
-- Declaring a function costs on every run of a script (Lua builds the
-- closure each time), and most runs, an uncontended acquire or release,
-- never touch the wait queue. So only issue_fence is declared at the top;
-- the queue's functions are built by queue(), which only the paths that
-- need them call.
--
-- The wait queue of a lock key lives in two keys of its hash slot (queue.go
-- has the design):
--   queue    sorted set: waiter id -> the server time (microseconds) at
--            which it first queued; a waiter that rejoins keeps its score
--   waiters  hash:
--              <id>     "token ttl_ms group keep_ms"  one queued waiter
--                       (keep_ms: how long its fence counter is kept)
--              @<group> "time_us seq"          the group's last sign of
--                       life: the server time a step of that Client ran,
--                       and the step's sequence number
--              !        "group id token fence seq lease_ms" the last
--                       hand-off (the grant record)
-- A waiter is alive while its group's last sign of life is less than
-- alive_us old; a dead waiter is dropped when reached.

-- issue_fence issues the next fencing token of a lock: max(counter + 1,
-- server time in microseconds), and keeps the counter for keep_ms (the
-- lock's TTL plus the fence margin; fence.go has the argument). Returns it
-- as a decimal string.
--
-- This runs on every grant, so it is written for speed: the clock is read
-- once and its two parts joined as text; the usual case, the clock ahead of
-- the counter, is one SET ... GET that writes the new fence and reads the
-- old one. Arguments to redis.call are strings, never Lua numbers, which
-- Redis would have to format. Only if the counter was at or ahead of the
-- clock is it written again, one above the old value.
local function issue_fence(fence_key, keep_ms)
  local t = redis.call('TIME')
  local fence = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local last = tonumber(redis.call('SET', fence_key, fence, 'PX', keep_ms, 'GET'))
  if last and last >= tonumber(fence) then
    fence = string.format('%.0f', last + 1)
    redis.call('SET', fence_key, fence, 'PX', keep_ms)
  end
  return fence
end

-- queue returns the functions that work a lock's wait queue, handoff, now
-- and alive, and claim_ms. issue_fence is passed in, so that building them costs no
-- upvalue unless they are built.
local function queue(issue_fence)
  -- now returns the server time in microseconds (a number).
  local function now()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end

  -- claim_ms is the longest a hand-off gives the lock to a waiter before
  -- the waiter has extended it to its TTL (claimTime in queue.go), and
  -- alive_us how long a group stays alive without a step (aliveWindow);
  -- keep is how long the queue's keys outlive the last step. A test
  -- checks these against queue.go.
  local claim_ms, alive_us, keep = 1000, 1000000, '2000'

  -- alive records a step of group at server time now_us with sequence
  -- number seq, and keeps the queue's keys for twice the alive window.
  local function alive(queue_key, waiters_key, group, now_us, seq)
    redis.call('HSET', waiters_key, '@' .. group, string.format('%.0f', now_us) .. ' ' .. seq)
    redis.call('PEXPIRE', queue_key, keep)
    redis.call('PEXPIRE', waiters_key, keep)
  end

  -- handoff gives a free lock to the first live waiter of its queue: sets
  -- the lock to the waiter's token for its TTL but at most claim_ms,
  -- issues its fence, writes the grant record and publishes the grant on
  -- the wake channel ("g id fence seq lease_ms"). Dead waiters met on the
  -- way are dropped. Returns the waiter id, or false when nobody live is
  -- waiting.
  --
  -- lease_ms is how long the lock lives counted from the group's last step
  -- (seq) that the server ran: the time since that step, on this server's
  -- clock, rounded down, plus the key's PX. The waiter counts its lease
  -- from when it sent that step, which was no later than the server ran
  -- it, so its estimate ends no later than the key expires (queue.go).
  local function handoff(lock_key, fence_key, queue_key, waiters_key, pub, chan)
    local now_us = now()
    while true do
      local head = redis.call('ZRANGE', queue_key, '0', '0')[1]
      if not head then
        return false
      end
      local data = redis.call('HGET', waiters_key, head)
      redis.call('ZREM', queue_key, head)
      redis.call('HDEL', waiters_key, head)
      local token, ttl, group, keep
      if data then
        token, ttl, group, keep = string.match(data, '^(%S+) (%d+) (%S+) ?(%d*)$')
      end
      local life = group and redis.call('HGET', waiters_key, '@' .. group)
      if life then
        local at, seq = string.match(life, '^(%d+) (%d+)$')
        if at and tonumber(at) + alive_us >= now_us then
          local px = math.min(tonumber(ttl), claim_ms)
          redis.call('SET', lock_key, token, 'PX', tostring(px))
          if keep == '' then -- queued by an older dlock: its default margin
            keep = tostring(tonumber(ttl) + 600000)
          end
          local fence = issue_fence(fence_key, keep)
          local lease = tostring(math.floor((now_us - tonumber(at)) / 1000) + px)
          redis.call('HSET', waiters_key, '!', group .. ' ' .. head .. ' ' .. token .. ' ' .. fence .. ' ' .. seq .. ' ' .. lease)
          redis.call(pub, chan, 'g ' .. head .. ' ' .. fence .. ' ' .. seq .. ' ' .. lease)
          return head
        end
        redis.call('HDEL', waiters_key, '@' .. group)
      end
    end
  end

  return handoff, now, alive, claim_ms
end
