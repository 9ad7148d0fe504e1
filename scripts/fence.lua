-- fence: issue_fence, prepended (scripts.go) to every script that grants
-- locks. It is its own file so that acquire_lean.lua, the script of every
-- uncontended lock, is built with it alone: a function declared in a
-- script is built again on every run, and prelude.lua's would cost every
-- uncontended acquire (docs/design.md, "Measurements").

-- issue_fence issues the next fencing token of a lock: max(counter + 1,
-- server time in microseconds), and keeps the counter for keep_ms (the
-- lock's TTL plus the fence margin; fence.go has the argument). Returns it
-- as a decimal string, and whether the counter is marked (mark.lua:
-- someone may wait or listen): a mark it found, which it keeps, or one it
-- was asked to make (mark: the caller works the queue, which has or just
-- had waiters). t, if given, is the TIME reply the caller has already read
-- in this script: the fence's order comes from the counter, so an earlier
-- reading of the clock serves as well, and saves a call.
--
-- A marked counter, whose mark must not expire while someone waits, is
-- kept at least as long as the queue's keys after a step (queueKeep, 2 s)
-- and the notify key after an attempt (notifyWindow, 3 s), even if the
-- grant's TTL plus the fence margin is shorter (mark.lua, keep_mark).
--
-- This runs on every grant, so it is written for speed: the clock is read
-- once and its two parts joined as text; the usual case, the clock ahead of
-- the counter, is one SET ... GET that writes the new fence and reads the
-- old one. Arguments to redis.call are strings, never Lua numbers, which
-- Redis would have to format. Only if the counter was at or ahead of the
-- clock, or marked when the caller did not know it, is it written again:
-- one above the old value, and with the mark.
local function issue_fence(fence_key, keep_ms, t, mark)
  t = t or redis.call('TIME')
  local fence = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  if mark and tonumber(keep_ms) < 3000 then
    keep_ms = '3000'
  end
  local old = redis.call('SET', fence_key, mark and '+' .. fence or fence, 'PX', keep_ms, 'GET')
  if not old then
    return fence, mark or false
  end
  local marked, last = string.byte(old) == 43, tonumber(old)
  if last and last >= tonumber(fence) then
    fence = string.format('%.0f', last + 1)
  elseif mark or not marked then
    return fence, marked or mark or false
  end
  if mark or marked then
    if tonumber(keep_ms) < 3000 then
      keep_ms = '3000'
    end
    redis.call('SET', fence_key, '+' .. fence, 'PX', keep_ms)
    return fence, true
  end
  redis.call('SET', fence_key, fence, 'PX', keep_ms)
  return fence, false
end
