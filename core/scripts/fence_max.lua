-- Raise the fence counter to at least ARGV[1] (Redlock's write-back of the
-- highest fence seen, so that the next holder's fence is higher).
-- KEYS[1] fence counter   ARGV[1] fence   ARGV[2] retention ms
local c = redis.call('GET', KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
