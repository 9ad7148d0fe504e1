-- again: grant_again answers an acquire run twice (go-redis retries on a broken connection):
-- the fence again if lock_key holds token (a new one if lost), else nil and the key's value.
local function grant_again(lock_key, fence_key, token, keep_ms)
  local value = redis.call('GET', lock_key)
  if not holds_token(value, token) then
    return nil, value
  end
  local last = redis.call('GET', fence_key)
  if (tonumber(last) or 0) > 0 then
    return last
  end
  return (issue_fence(fence_key, keep_ms))
end
