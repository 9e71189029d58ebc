-- Extend many mutex (or write-hold) leases at once, each as extend.lua
-- does: never shortening one, never re-creating a lost one. The renewals
-- of a batch due together, in one call instead of one per lease.
-- KEYS[i] lease i
-- ARGV[2i-1] token of lease i   ARGV[2i] its ttl ms
-- Returns, per lease, its remaining ms (>= 1) when held by its token, 0
-- when held by another token, -1 when there is no lease.
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if not v then
    out[i] = -1
  elseif not owns(v, ARGV[2 * i - 1]) then
    out[i] = 0
  else
    local left = redis.call('PTTL', key)
    local want = tonumber(ARGV[2 * i])
    if left < want then
      redis.call('PEXPIRE', key, want)
      left = want
    end
    out[i] = left
  end
end
return out
