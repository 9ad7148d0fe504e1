-- fast_release: an uncontended mutex's release (internal/wait/fast.go): delete K if it
-- holds the token and no line waits for it. No prelude.
-- KEYS[1]  lock K  KEYS[2]  queue Q (the line's first and third keys)
-- ARGV[1]  token
-- Returns 1 RELEASED, 0 NOT_HELD (or a key of another kind), or -1: a line waits, and
-- release.lua decides.
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
