-- Tair-style versioned put: store ARGV[1] in the hash KEYS[1] if its
-- version is still ARGV[2] ("0" for a key that does not exist), and bump
-- the version. Returns 1 when written, 0 when the version had moved.
--
-- ARGV[3] is the put's id, random, kept in field w with the value; ARGV[4]
-- is ARGV[2] plus one. A put sent again after its answer was lost (go-redis
-- resends a command whose connection broke, MaxRetries) finds the version
-- it bumped itself and its own id: it answers 1 again, not 0 — which
-- would say that nothing was written, and make Update apply its change a
-- second time.
--
-- Versions never pass through a Lua number (a double, exact only up to
-- 2^53): they are compared as decimal strings, and HINCRBY bumps them as
-- Redis int64s. HINCRBY goes first: at math.MaxInt64 it fails before
-- anything is written (the caller rejects that version anyway).
local cur = redis.call('HGET', KEYS[1], 'ver')
if not cur then
  cur = '0'
end
if cur ~= ARGV[2] then
  if cur == ARGV[4] and redis.call('HGET', KEYS[1], 'w') == ARGV[3] then
    return 1
  end
  return 0
end
redis.call('HINCRBY', KEYS[1], 'ver', 1)
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'w', ARGV[3])
return 1
