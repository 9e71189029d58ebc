-- Acquire a lease in arrival order (fair mode), claim a lease the release
-- script granted to this token, or join the queue.
-- KEYS[1] lease  KEYS[2] fence counter  KEYS[3] queue (list of tokens)
-- KEYS[4] queue deadlines (zset token -> ms)  KEYS[5] arrival times
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence retention ms
-- ARGV[5] queue entry ttl ms  ARGV[6] "1" to join the queue when not served
-- ARGV[7] the caller's grant channel, or '' (see join_queue)
-- Returns {1, fence} acquired, {2, fence} claimed or re-entered,
-- {0, holder pttl ms} held, {0, -2} free but reserved for an earlier waiter.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] .. '|' then
  -- The claim of a grant (the release took the token off the queue).
  redis.call('SET', KEYS[1], ARGV[2], 'PX', math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[3])))
  local f = redis.call('GET', KEYS[2])
  if not f then f = next_fence(KEYS[2], ARGV[4]) end
  return {2, tonumber(f)}
end
local now = now_ms()
prune(KEYS[3], KEYS[4], now, KEYS[5])

local function enqueue()
  if ARGV[6] ~= '1' then return end
  join_queue(KEYS[3], KEYS[4], KEYS[5], ARGV[1], now, tonumber(ARGV[5]), ARGV[7])
end

if v then
  if owns(v, ARGV[1]) then
    -- A claim of a grant, or a re-entry: never shorter than it was.
    redis.call('SET', KEYS[1], ARGV[2], 'PX', math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[3])))
    leave_queue(KEYS[3], KEYS[4], ARGV[1], KEYS[5])
    -- The lease's fence; if its counter expired meanwhile, a new, higher one.
    local f = redis.call('GET', KEYS[2])
    if not f then f = next_fence(KEYS[2], ARGV[4]) end
    return {2, tonumber(f)}
  end
  enqueue()
  return {0, redis.call('PTTL', KEYS[1])}
end
local head = redis.call('LINDEX', KEYS[3], 0)
if head and head ~= ARGV[1] then
  enqueue()
  return {0, -2}
end
if head then
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  redis.call('HDEL', KEYS[5], head)
end
local f = next_fence(KEYS[2], ARGV[4])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, f}
