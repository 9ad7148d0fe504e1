-- mark: the fencing counter's mark, prepended (scripts.go) to the scripts
-- that queue or listen for a lock (join, keepalive, acquire), or that may
-- clear the mark (release). fence.lua comes first.
--
-- A counter whose value starts with '+' ("+1764680000000123") is marked:
-- someone may wait in the key's queue or listen for its release. The
-- scripts of the uncontended path (acquire_lean, release_lean) declare the
-- lock key and its counter only, and read the counter anyway (the acquire
-- writes the next fence over it with SET ... GET; the release GETs it), so
-- a mark costs them no command and no declared key; each of those would
-- cost the server on every run (measured with the scripts alone, in
-- pipelines of 64: 8.7-9.1 us of server CPU per lock+unlock with two
-- EXISTS on two more keys each, 7.8-8.2 with the counter's mark). On a
-- marked counter they change nothing and leave the decision to the full
-- scripts (acquire, release), which look at the queue and the notify key
-- themselves and clear a mark nobody needs any more.
--
-- So a mark may be stale (set, with nobody waiting: one round trip more per
-- lock and per release until a full script clears it, which it does once
-- the queue and the notify key are gone: up to the notify window, 3 s,
-- after the last listener), but must not be missing while someone waits:
-- whoever queues or listens keeps it (join, keepalive, a listening
-- acquire: keep_mark), and issue_fence keeps it when it writes a fence. A
-- counter lost with the data loses its mark too; the waiters' keepalive
-- then hands over a key that was freed unannounced, and sets the mark
-- again. (Older dlock versions neither set nor keep the mark: README,
-- "Upgrading".)
--
-- Lua's tonumber and Go's strconv.ParseInt both read "+123" as 123, so a
-- marked counter is still the number it was to every reader, older dlock
-- versions included.

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

-- keep_mark marks the counter for someone who waits or listens for keep_ms
-- from now, and keeps the counter at least that long: it may expire sooner
-- (a grant keeps it for the TTL plus the fence margin, which may be 0), and
-- its mark must not go with it while the waiter is still there.
local function keep_mark(fence_key, keep_ms)
  set_mark(fence_key, true, keep_ms)
  local pttl = redis.call('PTTL', fence_key)
  if pttl >= 0 and pttl < tonumber(keep_ms) then
    redis.call('PEXPIRE', fence_key, keep_ms)
  end
end
