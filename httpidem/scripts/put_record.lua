-- Store a completed response unless a later lease already stored one.
-- KEYS[1] record
-- ARGV[1] this lease's fence, 20 digits  ARGV[2] encoded record  ARGV[3] ttl ms
-- A record starts "LKR1 " followed by its fence in 20 digits: equal widths
-- make the string comparison numeric. Returns 1 stored, 0 kept the newer.
local head = redis.call('GETRANGE', KEYS[1], 0, 24)
if #head == 25 and string.sub(head, 1, 5) == 'LKR1 ' and string.sub(head, 6, 25) > ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
