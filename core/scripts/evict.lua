-- Remove every hold of a key for an operator (Client.Evict): its lock's
-- lease, its semaphore's permits, its read-write lock's holds; raise each
-- fence that had holders, and wake the waiters.
-- KEYS[1] lease  KEYS[2] fence  KEYS[3] permits  KEYS[4] permit values
-- KEYS[5] semaphore fence  KEYS[6] rw writer  KEYS[7] rw readers
-- KEYS[8] rw reader values  KEYS[9] rw fence
-- ARGV[1] fence retention ms
-- Returns the number of holds removed.
local n = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
  next_fence(KEYS[2], ARGV[1])
  pub(KEYS[1], 'r:')
  n = n + 1
end
local permits = redis.call('ZCARD', KEYS[3])
if permits > 0 then
  redis.call('DEL', KEYS[3], KEYS[4])
  next_fence(KEYS[5], ARGV[1])
  pub(KEYS[3], 'r:')
  n = n + permits
end
local rw = redis.call('EXISTS', KEYS[6]) + redis.call('ZCARD', KEYS[7])
if rw > 0 then
  redis.call('DEL', KEYS[6], KEYS[7], KEYS[8])
  next_fence(KEYS[9], ARGV[1])
  pub(KEYS[6], 'r:')
  n = n + rw
end
return n
