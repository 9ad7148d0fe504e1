-- token: how the scripts read a mutex's key and tell its holder (scripts.go).

-- holds_token reports whether value, a mutex key's, is token, with or without the holder's mark.
local function holds_token(value, token)
  return value == token or value == token .. '+'
end

-- mutex_value reads a mutex's key: its value, or false when it is absent or of another kind
-- (WRONGTYPE: a semaphore's sorted set). Any other error is raised.
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
