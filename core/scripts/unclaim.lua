-- Delete a claim only if it still holds our value (a minority claim given
-- back on Redlock), and its id key (claim.lua) with it.
-- KEYS[1] the claim, KEYS[2] its id key   ARGV[1] our value
-- Returns 1 deleted, 0 not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0
