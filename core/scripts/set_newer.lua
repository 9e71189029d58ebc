-- Sets a record unless a newer one is stored, in one step.
-- KEYS[1] the record, KEYS[2] its order; ARGV[1] value, ARGV[2] order,
-- ARGV[3] TTL (ms). Returns 1 when it stored, 0 when KEYS[2] holds a
-- greater order. Equal orders replace each other.
local cur = redis.call('GET', KEYS[2])
if cur and tonumber(cur) > tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
