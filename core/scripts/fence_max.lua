-- Raise the fence counter to at least ARGV[1] (Redlock's write-back of the
-- highest fence seen, so that the next holder's fence is higher). The
-- counter keeps its expiry, made at least ARGV[2] ms from now (it must
-- outlive the lease, see hold_counter) and, when the counter stands ahead
-- of this node's clock (a fence from a node whose clock is ahead, or a
-- proposal), until the clock has passed it and ARGV[2] beyond (ahead_ms):
-- a counter seeded from this clock after it expired would start below it.
-- KEYS[1] fence counter   ARGV[1] fence   ARGV[2] retention ms
local f = tonumber(ARGV[1])
local c = tonumber(redis.call('GET', KEYS[1]))
if c and c >= f then
  f = c
else
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
local t = redis.call('TIME')
hold_counter(KEYS[1], ahead_ms(f, tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[2]))
return 1
