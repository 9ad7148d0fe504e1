-- mark: the marks that say someone may wait or listen for a lock,
-- prepended (scripts.go) to the scripts that queue or listen for a lock
-- (join, keepalive, acquire), or that may clear the mark (release).
-- fence.lua comes first.
--
-- There are two, read by the two scripts of the uncontended path, each of
-- which reads its key anyway, so that a mark costs them no command and no
-- declared key (each of those costs the server on every run):
--
-- - The counter's mark, for the lean acquire (acquire_lean.lua, which
--   writes the next fence over the counter with SET ... GET): a counter
--   whose value starts with '+' ("+1764680000000123") is marked.
-- - The holder's mark, for the lean release (release_lean.lua, which GETs
--   the lock key to compare it with its token): a mutex's value with a '+'
--   after the token ("<token>+") is marked.
--
-- A mark read from a key the script reads anyway costs less than a look
-- at the queue and the notify key, and the release declares the lock key
-- alone (docs/design.md, "Measurements", has the figures).
--
-- On a mark, the lean scripts change nothing and leave the decision to the
-- full scripts (acquire, release), which look at the queue and the notify
-- key themselves and clear a counter's mark nobody needs any more (the
-- holder's goes with the key the release deletes).
--
-- So a mark may be stale (set, with nobody waiting: one round trip more per
-- lock and per release until a full script clears it, which it does once
-- the queue and the notify key are gone: up to the notify window, 3 s,
-- after the last listener), but must not be missing while someone waits:
-- whoever queues or listens sets both and keeps them (join, keepalive, a
-- listening acquire: keep_mark); issue_fence keeps the counter's when it
-- writes a fence; a hand-off gives the lock with the holder's mark (give,
-- prelude.lua), and a full acquire that leaves the counter marked (someone
-- listens) takes the lock with it. A mark lost with the data goes with
-- what it marks (a lost lock key has no holder left to release it); the
-- waiters' keepalive then hands over the key that was freed unannounced,
-- and marks again.
--
-- Only a mutex token of this protocol version gets the holder's mark
-- (marked_value); a value of any other shape, which dlock did not write,
-- is left as it is, and its release is never lean.
--
-- Lua's tonumber and Go's strconv.ParseInt both read "+123" as 123, so a
-- marked counter is still the number it was to every reader.

-- set_mark marks the counter at fence_key (on) or clears its mark, and
-- leaves it as it is if it already is so. v is the counter's value if the
-- caller has read it (false: absent), nil if not. A mark on an absent
-- counter is "+0", kept for keep_ms: a counter that remembers no fence.
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
  if (string.byte(v) == 43) ~= on then
    redis.call('SET', fence_key, on and '+' .. v or string.sub(v, 2), 'KEEPTTL')
  end
end

-- marked_value is what a mutex's key holds for token when someone may wait
-- or listen: the token and a '+', if it is a token of this protocol
-- version (27 URL-safe base64 characters and the version tag, '-v1', then
-- nothing or '.' and a candidate's value: protocol.go, whose
-- readsHolderMark has the same rule, and a test holds the two together);
-- the value itself otherwise, as for a value dlock did not write.
local function marked_value(token)
  local after = string.byte(token, 31) -- none, or '.'
  if string.sub(token, 28, 30) == '-v1' and (after == nil or after == 46)
      and not string.find(string.sub(token, 1, 27), '[^%w_%-]') then
    return token .. '+'
  end
  return token
end

-- mark_holder gives the mutex held at lock_key, if any, the holder's mark.
-- (A key of another kind answers GET with an error, and is left alone: its
-- release has no lean form.) v is the key's value if the caller has read
-- it (false: absent or not a mutex's), nil if not.
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

-- keep_mark marks the counter, and the holder of the lock at lock_key, for
-- someone who waits or listens for keep_ms from now, and keeps the counter
-- at least that long: it may expire sooner (a grant keeps it for the TTL
-- plus the fence margin, which may be 0), and its mark must not go with it
-- while the waiter is still there. v is lock_key's value, as for
-- mark_holder.
local function keep_mark(fence_key, keep_ms, lock_key, v)
  mark_holder(lock_key, v)
  set_mark(fence_key, true, keep_ms)
  local pttl = redis.call('PTTL', fence_key)
  if pttl >= 0 and pttl < tonumber(keep_ms) then
    redis.call('PEXPIRE', fence_key, keep_ms)
  end
end
