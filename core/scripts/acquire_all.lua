-- Acquire several leases at once, all or none (LockAll's keys that share a
-- server: one Cluster slot, or any keys of a single server).
-- KEYS[2m-1] lease of member m  KEYS[2m] its fence counter
-- ARGV[1] ttl ms  ARGV[2] fence retention ms  ARGV[2+m] member m's lease value
-- Returns {1, fence of each member...} all acquired, or {0, m, holder pttl
-- ms} when member m is held (nothing was taken).
--
-- A member held with the very value this call gives it (a random token of
-- its own) was taken by this call: an earlier run of it whose answer was
-- lost, which go-redis sends again (MaxRetries). It takes such members
-- again, with fences above the first run's, as acquire.lua re-enters one.
-- (It answered "held" to its own leases, and nobody held them until their
-- TTL; LockAll then waited behind them.)
for i = 1, #KEYS, 2 do
  local pttl = redis.call('PTTL', KEYS[i])
  if pttl ~= -2 and redis.call('GET', KEYS[i]) ~= ARGV[2 + (i + 1) / 2] then
    return {0, (i + 1) / 2, pttl}
  end
end
local out = {1}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[2 + (i + 1) / 2], 'PX', ARGV[1])
  out[#out + 1] = next_fence(KEYS[i + 1], ARGV[2])
end
return out
