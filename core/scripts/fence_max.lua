-- Raise the fence counter to at least ARGV[1] (Redlock's write-back of the
-- highest fence seen, so that the next holder's fence is higher). The
-- counter keeps its expiry, made at least ARGV[2] ms from now: it must
-- outlive the lease (see hold_counter).
-- KEYS[1] fence counter   ARGV[1] fence   ARGV[2] retention ms
local c = redis.call('GET', KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
hold_counter(KEYS[1], ARGV[2])
return 1
