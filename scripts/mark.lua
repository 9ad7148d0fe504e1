-- mark: the marks that say someone may wait or listen (docs/design.md, "The format on Redis").
-- A mark may be stale, but is never missing while someone waits: whoever queues or listens
-- sets and keeps both (keep_mark); issue_fence keeps the counter's; give marks a new holder.

-- set_mark marks the counter at fence_key (on) or clears its mark. v is its value if read
-- (false: absent), else nil. An absent counter is marked as "+0", kept for keep_ms.
local function set_mark(fence_key, on, keep_ms, v)
  if v == nil then
    v = redis.call('GET', fence_key)
  end
  if not v then
    if on then
      redis.call('SET', fence_key, '+0', 'PX', keep_ms)
    end
    return
  end
  if (string.byte(v) == 43) ~= on then -- 43: '+'
    redis.call('SET', fence_key, on and '+' .. v or string.sub(v, 2), 'KEEPTTL')
  end
end

-- marked_value is token marked if it is a mutex token of this version (27 URL-safe base64
-- characters, '-v1', nothing or '.' and more: as node.go's readsHolderMark; a test).
local function marked_value(token)
  local after = string.byte(token, 31) -- none, or '.'
  if string.sub(token, 28, 30) == '-v1' and (after == nil or after == 46)
      and not string.find(string.sub(token, 1, 27), '[^%w_%-]') then
    return token .. '+'
  end
  return token
end

-- mark_holder gives the mutex at lock_key, if any, the holder's mark (a key of another kind,
-- GET's error, has no lean release). v: the key's value if read (false: none), else nil.
local function mark_holder(lock_key, v)
  if v == nil then
    v = redis.pcall('GET', lock_key)
  end
  if type(v) == 'string' and string.byte(v, -1) ~= 43 then
    local marked = marked_value(v)
    if marked ~= v then
      redis.call('SET', lock_key, marked, 'KEEPTTL')
    end
  end
end

-- keep_mark marks the counter and lock_key's holder (v: as for mark_holder) for keep_ms, and
-- keeps the counter that long at least: a grant may keep it less, and the mark must stay.
local function keep_mark(fence_key, keep_ms, lock_key, v)
  mark_holder(lock_key, v)
  set_mark(fence_key, true, keep_ms)
  local pttl = redis.call('PTTL', fence_key)
  if pttl >= 0 and pttl < tonumber(keep_ms) then
    redis.call('PEXPIRE', fence_key, keep_ms)
  end
end
