-- Give back a hold of a read-write lock and wake a waiter; a token that
-- holds nothing leaves the waiting writers (a writer giving up).
-- KEYS[1] writer lease (also the channel)  KEYS[2] readers  KEYS[3] reader
-- values  KEYS[4] waiting writers
-- ARGV[1] token  ARGV[2] 'w' (write hold) or 'r' (read hold)
-- Returns 1 released, 0 not held.
redis.call('ZREM', KEYS[4], ARGV[1])
if ARGV[2] == 'w' then
  if not owns(redis.call('GET', KEYS[1]), ARGV[1]) then
    return 0
  end
  redis.call('DEL', KEYS[1])
else
  local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not exp then
    return 0
  end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  if tonumber(exp) <= now_ms() then
    return 0
  end
end
redis.call('PUBLISH', KEYS[1], 'r:')
return 1
