-- prelude: the functions of the scripts that work the queue or several holders. A declared
-- function is built on every run: only holders and queue are declared; they build the rest.

-- holders returns the functions that keep a key's holders, of its token's kind (docs/design.md).
local function holders()
  local function kind(token)
    local k, n = string.match(token, '^~([srw])(%d*)~')
    return k or 'm', tonumber(n)
  end
  local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  -- expire keeps a sorted set of holders, and their fences, until the last one expires.
  local function expire(lock_key, holders_key)
    local last = redis.call('ZRANGE', lock_key, '-1', '-1', 'WITHSCORES')[2]
    if last then
      redis.call('PEXPIREAT', lock_key, last)
      redis.call('PEXPIREAT', holders_key, last)
    end
  end

  local function purge(lock_key, holders_key, now)
    local gone = redis.call('ZRANGEBYSCORE', lock_key, '-inf', now)
    if #gone > 0 then
      redis.call('ZREMRANGEBYSCORE', lock_key, '-inf', now)
      redis.call('HDEL', holders_key, unpack(gone))
      expire(lock_key, holders_key)
    end
  end
  -- fit reports whether token's grant fits beside the holders, or, second, the error reply
  -- that says it never can (another kind of lock, other permits). It raises nothing.
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
  -- fits is fit raising its error: only before any write (Redis keeps a raising script's writes).
  local function fits(lock_key, holders_key, token, now)
    local ok, err = fit(lock_key, holders_key, token, now)
    if err then
      error(err)
    end
    return ok
  end
  -- holds reports whether token holds the lock (a key of another kind holds nothing of ours),
  -- and from a mutex's GET whether the key is free, and its value (false: none) for mark_holder.
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
  -- give makes token a holder for px ms from now, with fence; a mutex, marked (mark.lua).
  local function give(lock_key, holders_key, token, px, now, fence)
    if kind(token) == 'm' then
      redis.call('SET', lock_key, marked_value(token), 'PX', tostring(px))
      return
    end
    redis.call('ZADD', lock_key, string.format('%.0f', now + px), token)
    redis.call('HSET', holders_key, token, fence)
    expire(lock_key, holders_key)
  end

  local function drop(lock_key, holders_key, token) -- ends token's hold, which the caller checked
    if kind(token) == 'm' then
      redis.call('DEL', lock_key)
      return
    end
    redis.call('ZREM', lock_key, token)
    redis.call('HDEL', holders_key, token)
    expire(lock_key, holders_key)
  end
  -- fence_of returns token's fence: its own, or a mutex's counter, which nothing raises while
  -- the key holds the token (nil if the counter is lost).
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
  -- wait_ms returns how long until the soonest holder expires; -2 (as PTTL) for none.
  local function wait_ms(lock_key, now)
    local first = redis.call('ZRANGE', lock_key, '0', '0', 'WITHSCORES')[2]
    if not first then
      return -2
    end
    return math.max(tonumber(first) - now, 0)
  end

  return {kind = kind, now_ms = now_ms, purge = purge, fit = fit, fits = fits, holds = holds,
    expire = expire, give = give, drop = drop, fence_of = fence_of, wait_ms = wait_ms}
end

local function queue(issue_fence) -- returns handoff, now, alive, claim_ms and holders()
  local h = holders()
  local function now()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2]), t
  end
  -- queue.go's claimTime, aliveWindow (a waiter's group is alive while its last step is
  -- younger) and queueKeep (the queue's keys outlive the last step); a test holds them.
  local claim_ms, alive_us, keep = 1000, 1000000, '2000'
  -- alive records group's step seq at now_us, keeps the queue's keys and marks lock_key's
  -- holder (value, if read) and counter, unless granting: the grant marks both for longer.
  local function alive(lock_key, queue_key, waiters_key, fence_key, group, now_us, seq, value,
      granting)
    redis.call('HSET', waiters_key, '@' .. group, string.format('%.0f', now_us) .. ' ' .. seq)
    redis.call('PEXPIRE', queue_key, keep)
    redis.call('PEXPIRE', waiters_key, keep)
    if not granting then
      keep_mark(fence_key, keep, lock_key, value)
    end
  end
  -- handoff grants the lock to the first live waiters while their grants fit, never past one
  -- that does not (nobody is overtaken), and drops dead ones. Each grant holds for the TTL,
  -- at most claim_ms, and is recorded ('!') and published; returns their count and the last
  -- message. absent: the key was just deleted; mine: the caller's group, whose mutex grant is
  -- returned unpublished; at_us, at: now(), if read. lease_ms counts from the group's last step
  -- as the server ran it, after the waiter sent it: the waiter's lease ends no later than the key.
  local function handoff(lock_key, fence_key, queue_key, waiters_key, holders_key, pub, chan,
      absent, mine, at_us, at)
    local t, now_us, now_ms = at, at_us, at_us and math.floor(at_us / 1000) -- or at a waiter
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
        -- One that never fits (wrong) is dropped; its next join raises the error to it alone.
        if ok then
          -- The releaser's own group is alive: the whole TTL. Another gets a claim, which its
          -- join confirms, so that one that died unseen holds the line up claim_ms at most.
          local px = math.min(tonumber(ttl), claim_ms)
          if group == mine then
            px = tonumber(ttl)
          end
          local fence = issue_fence(fence_key, keep, t, true)
          h.give(lock_key, holders_key, token, px, now_ms, fence)
          local lease = tostring(math.floor((now_us - tonumber(at)) / 1000) + px) .. ' ' .. px
          redis.call('HSET', waiters_key, '!',
            group .. ' ' .. head .. ' ' .. token .. ' ' .. fence .. ' ' .. seq .. ' ' .. lease)
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
