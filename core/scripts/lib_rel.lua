-- Release marks: a release that go-redis sends again after its answer was
-- lost finds what its first run released gone, or another's. Each release
-- that may be followed by another holder leaves a mark: a mutex's or
-- write hold's release its fence, in a sorted set beside the key, scored by server ms and kept
-- 15 s: longer than go-redis's defaults resend a command (3 retries of a
-- 3 s read timeout, and backoff). A run sent again that finds its mark
-- answers "released", as the first did. (A permit's, a read hold's and a
-- Redlock node's release, whose calls carry a nonce, set a key of their
-- own instead, "<…>:rel:<nonce>", for 15 s: one command, not four.)

-- rel_add marks m in z.
local function rel_add(z, m)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', z, now, m)
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now - 15000)
  redis.call('PEXPIRE', z, 15000)
end

-- rel_has reports whether m is marked in z (the set's expiry, and the
-- trim of the next mark, drop marks past their 15 s).
local function rel_has(z, m)
  return redis.call('ZSCORE', z, m) ~= false
end
