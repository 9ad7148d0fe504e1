-- fence: for the scripts that grant locks; not in the prelude (docs/design.md, "Measurements").

-- issue_fence issues a lock's next fence, max(counter + 1, server time in µs), as a string;
-- keeps the counter keep_ms (fence.go), but a marked one (mark.lua: found, or asked for) at
-- least 3 s, so that the mark outlives the queue's keep and the notify window; and says if
-- it is marked. t: a TIME reply already read (the counter gives the order).
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
  local marked, last = string.byte(old) == 43, tonumber(old) -- 43: '+'
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
