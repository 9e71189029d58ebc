-- Tair-style versioned put: store ARGV[1] in the hash KEYS[1] if its
-- version is still ARGV[2] ("0" for a key that does not exist), and bump
-- the version. Returns 1 when written, 0 when the version had moved.
local cur = redis.call('HGET', KEYS[1], 'ver')
if not cur then
  cur = '0'
end
if cur ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'ver', tostring(tonumber(cur) + 1))
return 1
