-- Redlock's acquisition on one node: acquire.lua without the waiters'
-- queue (Redlock has no fair mode), with the fence its client proposes to
-- every node (fresh_fence, next_fence).
-- KEYS[1] lease   KEYS[2] fence counter
-- ARGV[1] token   ARGV[2] lease value (token, or token|metadata)
-- ARGV[3] ttl ms  ARGV[4] fence counter retention ms
-- ARGV[5] proposed fence (µs)
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, holder pttl ms}
-- held.
local set, held = set_nx(KEYS[1], ARGV[2], ARGV[3])
if set then
  return {1, fresh_fence(KEYS[2], ARGV[4], ARGV[5])}
end
if owns(held, ARGV[1]) then
  -- Re-entry never shortens the lease its other holders were promised.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  -- A new fence, as for any acquisition (see acquire.lua).
  return {2, reentry_fence(KEYS[2], ARGV[4], KEYS[1], ARGV[5])}
end
return {0, redis.call('PTTL', KEYS[1])}
