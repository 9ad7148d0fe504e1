-- prelude: functions shared by the scripts that grant locks from a queue
-- or to several holders. It is prepended, after fence.lua and mark.lua,
-- to release, join, keepalive, leave and the shared_ scripts (scripts.go);
-- it declares functions only and runs nothing.
--
-- Declaring a function costs on every run of a script (Lua builds the
-- closure each time), and most runs of these scripts never touch the wait
-- queue. So only holders and queue are declared at the top; the queue's
-- functions are built by queue(), which only the paths that need them
-- call.
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
--              !        "group id token fence seq lease_ms px_ms" the last
--                       hand-off (the grant record)
-- A waiter is alive while its group's last sign of life is less than
-- alive_us old; a dead waiter is dropped when reached.

-- holders returns the functions that keep the holders of a lock key,
-- whatever kind of lock it is. The kind is in the token (keys.go, kinds):
-- a plain token is a mutex's, whose key is a string holding it; a token
-- that starts with "~s<permits>~" is a semaphore permit's, "~r~" a read
-- hold's and "~w~" a write hold's, whose key is a sorted set of the
-- holders' tokens scored by when each expires (server time, ms), beside a
-- hash (holders_key) of each holder's fence. Expired holders are purged
-- before any count.
local function holders()
  local function kind(token)
    local k, n = string.match(token, '^~([srw])(%d*)~')
    return k or 'm', tonumber(n)
  end

  local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end


  -- expire keeps a sorted set of holders, and their fences, until the
  -- last of them expires.
  local function expire(lock_key, holders_key)
    local last = redis.call('ZRANGE', lock_key, '-1', '-1', 'WITHSCORES')[2]
    if last then
      redis.call('PEXPIREAT', lock_key, last)
      redis.call('PEXPIREAT', holders_key, last)
    end
  end

  -- purge drops the holders that have expired, and keeps the rest until
  -- the last of them expires.
  local function purge(lock_key, holders_key, now)
    local gone = redis.call('ZRANGEBYSCORE', lock_key, '-inf', now)
    if #gone > 0 then
      redis.call('ZREMRANGEBYSCORE', lock_key, '-inf', now)
      redis.call('HDEL', holders_key, unpack(gone))
      expire(lock_key, holders_key)
    end
  end

  -- fit reports whether token's grant fits beside the current holders
  -- (purged), or, as its second result, the error reply that says why it
  -- never can: the holders are of another kind (a semaphore with other
  -- permits, or a read-write lock). It raises nothing.
  local function fit(lock_key, holders_key, token, now)
    local k, n = kind(token)
    if k == 'm' then
      local t = redis.call('TYPE', lock_key)['ok']
      if t ~= 'none' and t ~= 'string' then
        return false, {err = 'WRONGTYPE dlock: the key holds another kind of lock'}
      end
      return t == 'none'
    end
    purge(lock_key, holders_key, now)
    local count = redis.call('ZCARD', lock_key)
    if count == 0 then
      return true
    end
    local fk, fn = kind(redis.call('ZRANGE', lock_key, '0', '0')[1])
    if (k == 's') ~= (fk == 's') then
      return false, {err = 'WRONGTYPE dlock: the key holds another kind of lock'}
    end
    if k == 's' then
      if n ~= fn then
        return false, {err = 'DLOCKPERMITS ' .. fn}
      end
      return count < n
    end
    return k == 'r' and fk == 'r'
  end

  -- fits is fit for a caller that has written nothing yet: it raises
  -- fit's error, which reaches the caller whose token it is. (Redis does
  -- not undo a script's writes when it raises, so nothing may raise after
  -- one.)
  local function fits(lock_key, holders_key, token, now)
    local ok, err = fit(lock_key, holders_key, token, now)
    if err then
      error(err)
    end
    return ok
  end

  -- holds reports whether token holds the lock now. A key of another
  -- kind (WRONGTYPE) holds nothing of ours; any other error is raised.
  -- For a mutex it also reports whether the key is free (fits, from the
  -- same GET), and the key's value (false: absent, or not a mutex's), for
  -- mark_holder (mark.lua) to mark without a GET of its own.
  local function holds(lock_key, token, now)
    local m = kind(token) == 'm'
    local v
    if m then
      v = redis.pcall('GET', lock_key)
    else
      v = redis.pcall('ZSCORE', lock_key, token)
    end
    if type(v) == 'table' then
      if string.sub(v.err, 1, 9) == 'WRONGTYPE' then
        return false, false, false
      end
      error(v)
    end
    if m then
      return holds_token(v, token), v == false, v
    end
    return v ~= false and tonumber(v) > now, false, false
  end


  -- give makes token a holder for px ms from now, with fence.
  local function give(lock_key, holders_key, token, px, now, fence)
    if kind(token) == 'm' then
      -- Marked: others may wait (mark.lua). A stale mark costs the
      -- holder's release one round trip more, as the counter's does.
      redis.call('SET', lock_key, marked_value(token), 'PX', tostring(px))
      return
    end
    redis.call('ZADD', lock_key, string.format('%.0f', now + px), token)
    redis.call('HSET', holders_key, token, fence)
    expire(lock_key, holders_key)
  end

  -- drop ends token's hold (the caller checked it holds).
  local function drop(lock_key, holders_key, token)
    if kind(token) == 'm' then
      redis.call('DEL', lock_key)
      return
    end
    redis.call('ZREM', lock_key, token)
    redis.call('HDEL', holders_key, token)
    expire(lock_key, holders_key) -- the key lives as long as its longest holder left
  end

  -- fence_of returns the fence of token's hold: for a mutex the counter's
  -- (nothing issues another while the key holds the token; nil if it
  -- remembers none, and perhaps marked: mark.lua), else the holder's own.
  local function fence_of(fence_key, holders_key, token)
    if kind(token) == 'm' then
      local v = redis.call('GET', fence_key)
      if (tonumber(v) or 0) > 0 then
        return v
      end
      return nil
    end
    return redis.call('HGET', holders_key, token)
  end

  -- wait_ms returns how long a grant that does not fit may have to wait
  -- for a holder to expire: the soonest expiry among the holders.
  local function wait_ms(lock_key, now)
    local first = redis.call('ZRANGE', lock_key, '0', '0', 'WITHSCORES')[2]
    if not first then
      return -2
    end
    return math.max(tonumber(first) - now, 0)
  end

  return {kind = kind, now_ms = now_ms, purge = purge, fit = fit, fits = fits, holds = holds, expire = expire,
    give = give, drop = drop, fence_of = fence_of, wait_ms = wait_ms}
end

-- queue returns the functions that work a lock's wait queue, handoff, now
-- and alive, claim_ms, and the holder functions (h, from holders()).
-- issue_fence is passed in, so that building them costs no upvalue unless
-- they are built.
local function queue(issue_fence)
  local h = holders()

  -- now returns the server time in microseconds (a number), and the TIME
  -- reply it came from (for issue_fence).
  local function now()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2]), t
  end

  -- claim_ms is the longest a hand-off gives the lock to a waiter before
  -- the waiter has extended it to its TTL (claimTime in queue.go), and
  -- alive_us how long a group stays alive without a step (aliveWindow);
  -- keep is how long the queue's keys outlive the last step. A test
  -- checks these against queue.go.
  local claim_ms, alive_us, keep = 1000, 1000000, '2000'

  -- alive records a step of group at server time now_us with sequence
  -- number seq, keeps the queue's keys for twice the alive window, and
  -- marks the fencing counter and the holder of lock_key (mark.lua):
  -- someone waits, so the lean scripts must leave the key to the full
  -- ones. value is lock_key's, if the caller has read it (holds).
  -- granting says that the caller grants the lock next (release.lua after
  -- its joins): that grant marks the counter, for longer than the queue
  -- is kept (issue_fence), and the holder (give), so alive marks nothing.
  local function alive(lock_key, queue_key, waiters_key, fence_key, group, now_us, seq, value, granting)
    redis.call('HSET', waiters_key, '@' .. group, string.format('%.0f', now_us) .. ' ' .. seq)
    redis.call('PEXPIRE', queue_key, keep)
    redis.call('PEXPIRE', waiters_key, keep)
    if not granting then
      keep_mark(fence_key, keep, lock_key, value)
    end
  end

  -- handoff gives the lock to the first live waiters of its queue while
  -- their grants fit (a mutex: the one first waiter, if the key is free;
  -- permits and read holds: as many as fit, in order; never one behind a
  -- waiter that does not fit, so nobody is overtaken). Each grant makes
  -- the waiter a holder for its TTL but at most claim_ms, issues its
  -- fence, writes the grant record and publishes the grant on the wake
  -- channel ("g id fence seq lease_ms px_ms"). Dead waiters met on the way are
  -- dropped. Returns how many waiters it granted, and the last grant's
  -- message (nil if none).
  --
  -- absent says that the caller has just deleted the lock key: the first
  -- grant then fits without a look at the key. mine, if given, is the
  -- caller's own group: a mutex's grant to one of its waiters is not
  -- published, since the caller gets the message as its reply (release.lua)
  -- and no other Client's waiter needs it. at_us and at, if given, are the
  -- server's time and the TIME reply the caller read in this script.
  --
  -- lease_ms is how long the lock lives counted from the group's last step
  -- (seq) that the server ran: the time since that step, on this server's
  -- clock, rounded down, plus the key's PX. The waiter counts its lease
  -- from when it sent that step, which was no later than the server ran
  -- it, so its estimate ends no later than the key expires (queue.go).
  local function handoff(lock_key, fence_key, queue_key, waiters_key, holders_key, pub, chan, absent, mine, at_us, at)
    local t, now_us, now_ms = at, at_us, at_us and math.floor(at_us / 1000) -- else read at the first waiter: a queue may be empty
    local granted, msg = 0, nil
    while true do
      local head = redis.call('ZRANGE', queue_key, '0', '0')[1]
      if not head then
        return granted, msg
      end
      if not t then
        now_us, t = now()
        now_ms = math.floor(now_us / 1000)
      end
      local data = redis.call('HGET', waiters_key, head)
      local token, ttl, group, keep
      if data then
        token, ttl, group, keep = string.match(data, '^(%S+) (%d+) (%S+) (%d+)$')
      end
      local life = group and redis.call('HGET', waiters_key, '@' .. group)
      local at, seq
      if life then
        at, seq = string.match(life, '^(%d+) (%d+)$')
      end
      if at and tonumber(at) + alive_us >= now_us then
        local ok, wrong = true, nil
        if not (absent and granted == 0) then
          ok, wrong = h.fit(lock_key, holders_key, token, now_ms)
        end
        if not ok and not wrong then
          return granted, msg -- it does not fit yet, and stays first in line
        end
        redis.call('ZREM', queue_key, head)
        redis.call('HDEL', waiters_key, head)
        -- A waiter that asks for another kind of lock than the holders
        -- (a semaphore of other permits) can never fit beside them, and
        -- must not hold the line up: it is dropped. Missing at its group's
        -- next roll call, it joins again, and that join raises the error
        -- to its caller alone.
        if ok then
          -- A waiter of the releaser's own group is alive (its Client is
          -- running this release): it gets its whole TTL. Any other gets
          -- a claim, which it confirms by joining again (join.lua) before
          -- its Lock returns, so that a waiter that died unseen holds the
          -- line up for claim_ms at most.
          local px = math.min(tonumber(ttl), claim_ms)
          if group == mine then
            px = tonumber(ttl)
          end
          local fence = issue_fence(fence_key, keep, t, true)
          h.give(lock_key, holders_key, token, px, now_ms, fence)
          local lease = tostring(math.floor((now_us - tonumber(at)) / 1000) + px) .. ' ' .. px
          redis.call('HSET', waiters_key, '!', group .. ' ' .. head .. ' ' .. token .. ' ' .. fence .. ' ' .. seq .. ' ' .. lease)
          msg = 'g ' .. head .. ' ' .. fence .. ' ' .. seq .. ' ' .. lease
          granted = granted + 1
          if h.kind(token) == 'm' then
            if group ~= mine then
              redis.call(pub, chan, msg)
            end
            return granted, msg
          end
          redis.call(pub, chan, msg)
        end
      else
        redis.call('ZREM', queue_key, head)
        redis.call('HDEL', waiters_key, head)
        if life then
          redis.call('HDEL', waiters_key, '@' .. group)
        end
      end
    end
  end

  return handoff, now, alive, claim_ms, h
end
