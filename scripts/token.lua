-- token: what the scripts that read a mutex's key share, prepended
-- (scripts.go) before everything else.

-- The lean scripts' answers when someone may wait or listen (mark.lua),
-- for the full script to follow: acquire_lean's MARKED (the counter is
-- marked) and release_lean's WAITED (the holder is). node.go has the same
-- names, leanMarked and leanWaited; a test holds them together.
local MARKED, WAITED = -3, 2

-- holds_token reports whether value, a mutex key's, is token: as set, or
-- with the holder's mark a waiter may have added since (mark.lua).
local function holds_token(value, token)
  return value == token or value == token .. '+'
end

-- mutex_value reads a mutex's key: its value, or false when it is absent
-- or holds another kind of lock (a semaphore's sorted set: WRONGTYPE),
-- which holds nothing of ours. Any other error is raised.
local function mutex_value(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    if string.sub(v.err, 1, 9) == 'WRONGTYPE' then
      return false
    end
    error(v)
  end
  return v
end
