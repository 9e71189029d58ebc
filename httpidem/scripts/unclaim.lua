-- Give a claim back if it still carries our token (compare and delete),
-- and uncount it.
-- KEYS[1] claim  KEYS[2] counter (optional, same hash tag)  ARGV[1] token
-- Returns 1 released, 0 not ours (expired or someone else's).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('DECR', KEYS[2])
end
return 1
