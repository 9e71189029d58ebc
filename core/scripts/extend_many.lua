-- Extend many mutex (or write-hold) leases of one TTL at once, each as
-- extend.lua does: never shortening one, never re-creating a lost one. The
-- renewals of a batch due together, in one call instead of one per lease.
-- KEYS[i] lease i
-- ARGV[1] the ttl ms   ARGV[i+1] token of lease i
-- Returns, per lease, 1 when held by its token (it now lasts at least the
-- ttl), 0 when held by another token, -1 when there is no lease (or the
-- key holds something other than a string, which no lease is: MGET reads it
-- as absent, where extend.lua's GET fails).
--
-- On Redis 7, PEXPIRE GT extends a lease only if that makes it longer, in
-- one call; older servers refuse the option, and the script then reads the
-- remaining time first, as extend.lua does.
--
-- The loop runs once per lease renewed, so it does the least it can: the
-- ttl goes to PEXPIRE as the string it came as (a Lua number would be
-- printed back to a string, and the reply carries no number to parse),
-- it comes once, not once per lease, and the common value, the token
-- alone, is compared before owns.
local call, pcall_ = redis.call, redis.pcall
local gt = true
local want = ARGV[1]
local wantN = tonumber(want)
-- The leases' values come in one MGET (a batch is of one node, and on a
-- Cluster of one slot), not a GET each: a fifth less Redis time per lease.
local vals = call('MGET', unpack(KEYS))
local out = {}
for i = 1, #KEYS do
  local v = vals[i]
  if not v then
    out[i] = -1
  else
    local tok = ARGV[i + 1]
    if v ~= tok and not owns(v, tok) then
      out[i] = 0
    else
      local key = KEYS[i]
      if gt and type(pcall_('PEXPIRE', key, want, 'GT')) == 'table' then
        gt = false -- an error reply: no GT here
      end
      if not gt and call('PTTL', key) < wantN then
        call('PEXPIRE', key, want)
      end
      out[i] = 1
    end
  end
end
return out
