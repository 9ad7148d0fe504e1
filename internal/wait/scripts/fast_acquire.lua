-- fast_acquire: an uncontended mutex's acquire (internal/wait/fast.go): take K if it is
-- free and no line waits for it. (KEYS: fence.lua's, put first, with K, F and issue_fence;
-- then KEYS[3], the queue Q: the first three of the line's keys)
-- ARGV[1]  token  ARGV[2]  ttl_ms  ARGV[3]  keep_ms (F's life, >= ttl_ms)
-- Returns the fence (a string): GRANTED; or 0: not granted, and acquire.lua decides.
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', K, ARGV[1], 'NX', 'PX', ARGV[2]) then
  return issue_fence(ARGV[3])
end
return 0
