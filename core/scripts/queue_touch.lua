-- Keep a queued mutex waiter's place, cheaply: the periodic call of a
-- waiter that heard nothing. It refreshes the waiter's entry deadline and
-- tells it to make a full attempt instead when one could succeed.
-- KEYS[1] lease  KEYS[2] queue  KEYS[3] queue deadlines  KEYS[4] arrival times
-- ARGV[1] token  ARGV[2] queue entry ttl ms
-- Returns -1: attempt now (the key is free or granted to the token, or the
-- token's entry is gone); else the entry was refreshed: keep waiting, the
-- holder's lease has this many ms left.
local v = redis.call('GET', KEYS[1])
if v and not owns(v, ARGV[1]) then
  local entry = tonumber(ARGV[2])
  if redis.call('ZADD', KEYS[3], 'XX', 'CH', now_ms() + entry, ARGV[1]) == 1 then
    -- The queue's keys outlive every entry (join_queue sets them to twice
    -- the entry ttl); a queue that only refreshes must keep them alive.
    if redis.call('PTTL', KEYS[3]) < entry then
      redis.call('PEXPIRE', KEYS[2], 2 * entry)
      redis.call('PEXPIRE', KEYS[3], 2 * entry)
      redis.call('PEXPIRE', KEYS[4], 2 * entry)
    end
    return redis.call('PTTL', KEYS[1])
  end
end
return -1
