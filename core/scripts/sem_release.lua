-- Give back a permit this token holds and wake a waiter; a token that
-- holds none leaves the semaphore's queue instead (a fair waiter giving
-- up), waking the next waiter if it was queued. The waiter woken is the
-- queued one that the freed permit now serves (the queue's (free)th, free
-- counted against the limit the caller gives), on its Client's grant
-- channel ("g:<token>|<permits key>"): one process, not every process
-- waiting on the key. When no queued waiter is served by it (none queue, or
-- a caller that gives no limit), the release is published on the permits
-- key's channel ("r:"), which wakes one waiter per Client.
-- KEYS[1] permits (also the release channel)  KEYS[2] permit values
-- KEYS[3] queue  KEYS[4] queue deadlines  KEYS[5] queue arrival times
-- KEYS[6] the release's mark, "<permits>:rel:<nonce>" (a nonce unique to
-- the release call: a twin sharing the token, WithToken, releases with
-- one of its own), or none
-- ARGV[1] token  ARGV[2] the caller's limit, or absent  ARGV[3] "1": only
-- leave the queue (a waiter of a caller's token giving up: a permit of the
-- token may be another process's)
-- Returns 1 released, 0 not held (gone, or expired).
--
-- A release sent again by go-redis (its answer lost) finds no permit of
-- its token: its first run's mark, set for 15 s (longer than go-redis's
-- defaults resend a command), says it released it. One SET a release.
local function wake()
  local limit = tonumber(ARGV[2])
  if limit then
    local free = limit - redis.call('ZCARD', KEYS[1])
    if free >= 1 then
      local t = redis.call('LINDEX', KEYS[3], free - 1)
      local since = t and redis.call('HGET', KEYS[5], t)
      local chan = since and string.match(since, '^%d+|(.+)$')
      if chan then
        pub_to(KEYS[1], chan, 'g:' .. t .. '|' .. KEYS[1])
        return
      end
    end
  end
  pub(KEYS[1], 'r:')
end

local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or ARGV[3] == '1' then
  if ARGV[3] ~= '1' and KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1 then
    return 1 -- released by an earlier run of this call
  end
  if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[1])
    redis.call('HDEL', KEYS[5], ARGV[1])
    wake()
  end
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if tonumber(exp) < now_ms() then
  return 0
end
if KEYS[6] then
  redis.call('SET', KEYS[6], '1', 'PX', 15000)
end
wake()
return 1
