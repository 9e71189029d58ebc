-- Delete a lease this token holds and wake its waiters.
-- KEYS[1] lease (also the notification channel)
-- ARGV[1] token
-- Returns 1 released, 0 not held.
local v = redis.call('GET', KEYS[1])
if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '|') then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'released')
  return 1
end
return 0
