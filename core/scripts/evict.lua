-- Remove the holds of a key an operator saw (Client.Evict): its lock's
-- lease, its semaphore's permits, its read-write lock's holds, each only
-- while the token Inspect showed still holds it — a hold taken since is
-- left be; raise each fence that lost a holder, and wake the waiters.
-- KEYS[1] lease  KEYS[2] fence  KEYS[3] permits  KEYS[4] permit values
-- KEYS[5] semaphore fence  KEYS[6] rw writer  KEYS[7] rw readers
-- KEYS[8] rw reader values  KEYS[9] rw fence  KEYS[10] the memo
-- ("<lease>:ev")
-- ARGV[1] fence retention ms  ARGV[2] a nonce unique to the Evict call
-- ARGV[3] the lock's holder token, or ''  ARGV[4..] the other holds seen,
-- "permit:<token>", "write:<token>" or "read:<token>"
-- Returns the holds removed, "<kind>:<token>" each.
--
-- A run sent again by go-redis (its answer lost) finds the memo of its
-- nonce and answers what the first run did, doing nothing: it must not
-- take a hold a waiter took since the first run, nor say nothing was held.
--
-- The waiters are woken both ways, PUBLISH and SPUBLISH (Redis >= 7): the
-- operator's Client need not know whether the fleet uses sharded
-- notifications (WithShardedNotify), and an eviction is rare.
local function wake(ch)
  redis.call('PUBLISH', ch, 'r:')
  redis.pcall('SPUBLISH', ch, 'r:')
end
local memo = redis.call('GET', KEYS[10])
if memo then
  local nonce, list = string.match(memo, '^([^\n]*)\n(.*)$')
  if nonce == ARGV[2] then
    return cjson.decode(list)
  end
end
local removed = {}
if ARGV[3] ~= '' and owns(redis.call('GET', KEYS[1]), ARGV[3]) then
  redis.call('DEL', KEYS[1])
  next_fence(KEYS[2], ARGV[1])
  wake(KEYS[1])
  removed[#removed + 1] = 'lock:' .. ARGV[3]
end
local permits, rw = false, false
for i = 4, #ARGV do
  local kind, tok = string.match(ARGV[i], '^(%a+):(.*)$')
  if kind == 'permit' and redis.call('ZREM', KEYS[3], tok) == 1 then
    redis.call('HDEL', KEYS[4], tok)
    permits = true
    removed[#removed + 1] = ARGV[i]
  elseif kind == 'write' and owns(redis.call('GET', KEYS[6]), tok) then
    redis.call('DEL', KEYS[6])
    rw = true
    removed[#removed + 1] = ARGV[i]
  elseif kind == 'read' and redis.call('ZREM', KEYS[7], tok) == 1 then
    redis.call('HDEL', KEYS[8], tok)
    rw = true
    removed[#removed + 1] = ARGV[i]
  end
end
if permits then
  next_fence(KEYS[5], ARGV[1])
  wake(KEYS[3])
end
if rw then
  next_fence(KEYS[9], ARGV[1])
  wake(KEYS[6])
end
local list = '[]'
if #removed > 0 then list = cjson.encode(removed) end
redis.call('SET', KEYS[10], ARGV[2] .. '\n' .. list, 'PX', 60000)
return removed
