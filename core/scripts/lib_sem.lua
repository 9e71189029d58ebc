-- Semaphore helpers. A semaphore keeps its permits in a sorted set (token
-- scored by its expiry, unix ms on the server's clock) and, per permit, its
-- fence and lease value in a hash ("<fence>|<value>").
--
-- A permit scored e is live while the clock in whole milliseconds reads
-- at most e, and gone once it reads more, as Redis judges a key's expiry:
-- the clock is read rounded down, so a permit given ttl when it read now
-- was given it up to a millisecond after now, and freeing it when the
-- clock reads now+ttl would free it before ttl had passed since the
-- request (and so before its holder, who counts ttl from its send, stops
-- believing it). A hold that reads e-now left has at least that left.

-- sem_prune drops the permits whose expiry has passed.
local function sem_prune(z, h, now)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', '(' .. now)
  for _, t in ipairs(gone) do
    redis.call('ZREM', z, t)
    redis.call('HDEL', h, t)
  end
end

-- sem_keep makes both keys expire with their last permit.
local function sem_keep(z, h)
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if last[2] then
    local at = math.floor(tonumber(last[2])) + 1
    redis.call('PEXPIREAT', z, at)
    redis.call('PEXPIREAT', h, at)
  end
end
