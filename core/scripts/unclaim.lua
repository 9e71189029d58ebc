-- Delete a claim only if it still holds our value (a minority claim given
-- back on Redlock).
-- KEYS[1] the claim   ARGV[1] our value
-- Returns 1 deleted, 0 not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
