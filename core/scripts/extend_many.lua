-- Extend many mutex (or write-hold) leases at once, each as extend.lua
-- does: never shortening one, never re-creating a lost one. The renewals
-- of a batch due together, in one call instead of one per lease.
-- KEYS[i] lease i
-- ARGV[2i-1] token of lease i   ARGV[2i] its ttl ms
-- Returns, per lease, a lower bound of its remaining ms (>= 1) when held
-- by its token — its ttl: the lease now lasts at least that long — 0 when
-- held by another token, -1 when there is no lease.
--
-- On Redis 7, PEXPIRE GT extends a lease only if that makes it longer, in
-- one call; older servers refuse the option, and the script then reads the
-- remaining time first, as extend.lua does.
local gt = true
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if not v then
    out[i] = -1
  elseif not owns(v, ARGV[2 * i - 1]) then
    out[i] = 0
  else
    local want = tonumber(ARGV[2 * i])
    if gt and type(redis.pcall('PEXPIRE', key, want, 'GT')) == 'table' then
      gt = false -- an error reply: no GT here
    end
    if not gt and redis.call('PTTL', key) < want then
      redis.call('PEXPIRE', key, want)
    end
    out[i] = want
  end
end
return out
