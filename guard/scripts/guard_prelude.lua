-- The fence guard's shared functions (guard.go), prepended to guard.lua and
-- to every guarded script. A resource's record holds the highest fence any
-- guarded write to it was accepted with, as a decimal string.

-- above reports whether decimal a is greater than decimal b. Fences are
-- positive integers written without leading zeros, so the longer is the
-- greater, and of equal lengths the text order is the number order: exact
-- for every int64, where Lua's doubles are exact only below 2^53.
local function above(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end

-- admitted returns nil when fence may write (it is at least the record's),
-- or the error reply that refuses it, naming the highest fence accepted.
local function admitted(rec, fence)
  local seen = redis.call('GET', rec)
  if seen and above(seen, fence) then
    return redis.error_reply('DLOCKSTALE ' .. seen)
  end
  return nil
end

-- record keeps fence as the resource's highest, for as long as the
-- resource lives and retention_ms after it (guard.go, "Lifetime"): no
-- expiry while the resource has none, the resource's own expiry plus the
-- retention while it has one, the retention from now once it is gone.
local function record(res, rec, fence, retention_ms)
  redis.call('SET', rec, fence)
  local ttl = redis.call('PTTL', res)
  if ttl == -2 then
    redis.call('PEXPIRE', rec, retention_ms)
  elseif ttl >= 0 then
    redis.call('PEXPIRE', rec, ttl + retention_ms)
  end
end
