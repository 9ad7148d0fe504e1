-- prelude: functions shared by the scripts that grant locks. It is
-- prepended to acquire, release, wait and leave (scripts.go); it declares
-- functions only and runs nothing.
--
-- Declaring a function costs on every run of a script (Lua builds the
-- closure each time), and most runs, an uncontended acquire or release,
-- never touch the wait queue. So only issue_fence is declared at the top;
-- the queue's functions are built by queue(), which only the paths that
-- need them call.
--
-- The wait queue of a lock key lives in two keys of its hash slot: a sorted
-- set of waiter ids ordered by the server time (microseconds) at which they
-- queued, and a hash from waiter id to "token ttl_ms alive_until_ms seq".
-- A waiter keeps alive_until in the future while it waits; a waiter whose
-- alive_until has passed is dead, and is dropped when reached.

-- issue_fence issues the next fencing token of a lock: max(counter + 1,
-- server time in microseconds), and keeps the counter for a day after
-- (fence.go has the argument). Returns it as a decimal string.
--
-- This runs on every grant, so it is written for speed: the clock is read
-- once and its two parts joined as text; the usual case, the clock ahead of
-- the counter, is one SET ... GET that writes the new fence and reads the
-- old one. Arguments to redis.call are strings, never Lua numbers, which
-- Redis would have to format. Only if the counter was at or ahead of the
-- clock is it written again, one above the old value.
local function issue_fence(fence_key)
  local t = redis.call('TIME')
  local fence = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local last = tonumber(redis.call('SET', fence_key, fence, 'PX', '86400000', 'GET'))
  if last and last >= tonumber(fence) then
    fence = string.format('%.0f', last + 1)
    redis.call('SET', fence_key, fence, 'PX', '86400000')
  end
  return fence
end

-- queue returns the functions that work a lock's wait queue: handoff and
-- now. issue_fence is passed in, so that building them costs no upvalue
-- unless they are built.
local function queue(issue_fence)
  -- now returns the server time in milliseconds and in microseconds (as
  -- numbers; the wait queue is ordered by the latter).
  local function now()
    local t = redis.call('TIME')
    local s, us = tonumber(t[1]), tonumber(t[2])
    return s * 1000 + math.floor(us / 1000), s * 1000000 + us
  end

  -- claim_ms is how long a hand-off gives the lock to a waiter before the
  -- waiter has extended it to its TTL: claimTime in queue.go, whose tests
  -- check that the two agree.
  local claim_ms = '1000'

  -- grant_list returns the name of a waiter's grant list: keys.go's grant
  -- prefix and the waiter's id. The prefix is the queue key's, with "grant"
  -- for "queue" (both are derived from the lock key the same way, keys.go),
  -- so it keeps the lock key's hash slot.
  local function grant_list(queue_key, id)
    return 'dlock:grant:' .. string.sub(queue_key, 13) .. ':' .. id
  end

  -- handoff gives a free lock to the first live waiter of its queue: sets the
  -- lock to the waiter's token for at most claim_ms (the waiter extends it to
  -- its TTL once it knows), issues its fence, and pushes "fence seq" onto the
  -- waiter's grant list, which the waiter is blocked on (BLPOP). Dead waiters
  -- met on the way are dropped. Returns the waiter id, or false when nobody
  -- live is waiting.
  local function handoff(lock_key, fence_key, queue_key, waiters_key)
    local now_ms
    while true do
      local head = redis.call('ZRANGE', queue_key, '0', '0')[1]
      if not head then
        return false
      end
      if not now_ms then
        now_ms = now()
      end
      local data = redis.call('HGET', waiters_key, head)
      redis.call('ZREM', queue_key, head)
      redis.call('HDEL', waiters_key, head)
      if data then
        local token, ttl, alive, seq = string.match(data, '^(%S+) (%d+) (%d+) (%d+)$')
        if token and tonumber(alive) >= now_ms then
          local px = ttl
          if tonumber(ttl) > tonumber(claim_ms) then
            px = claim_ms
          end
          redis.call('SET', lock_key, token, 'PX', px)
          local fence = issue_fence(fence_key)
          local grant = grant_list(queue_key, head)
          redis.call('RPUSH', grant, fence .. ' ' .. seq .. ' ' .. px)
          redis.call('PEXPIRE', grant, px)
          return head
        end
      end
    end
  end

  return handoff, now
end
