-- Give back a hold of a read-write lock and wake a waiter: the earliest
-- waiting writer, if any (a message naming it), else one waiter per Client
-- (readers then wake each other). A token that holds nothing leaves the
-- waiting writers (a writer giving up).
-- KEYS[1] writer lease (also the channel)  KEYS[2] readers  KEYS[3] reader
-- values  KEYS[4] waiting writers  KEYS[5] their arrival order (a list)
-- KEYS[6] their arrival times  KEYS[7] the fence counter  KEYS[8] the
-- release marks (lib_rel.lua) of a fenced write release, or a read hold
-- release's own mark "<readers>:rel:<nonce>" (see sem_release.lua), or
-- none
-- ARGV[1] token  ARGV[2] 'w' (write hold), 'r' (read hold), or 'q' (only
-- leave the waiting writers: a writer of a caller's token giving up, whose
-- token's hold may be another process's)  ARGV[3] of
-- a write hold: the fence of the acquisition the release ends, or '' (then
-- any write hold of the token)
-- Returns 1 released, 0 not held.
--
-- With a fence, a write hold of the token whose counter is above it was
-- taken or re-entered (which takes a new fence) after the acquisition this
-- release ends — no reader can raise the counter while a writer holds —
-- so a late release leaves it be, as release.lua does for a mutex.
local now = now_ms()
local function wake()
  while true do
    local head = redis.call('LINDEX', KEYS[5], 0)
    if not head then break end
    local due = redis.call('ZSCORE', KEYS[4], head)
    if due and tonumber(due) > now then
      pub(KEYS[1], 'g:' .. head)
      return
    end
    redis.call('LPOP', KEYS[5])
    redis.call('HDEL', KEYS[6], head)
  end
  pub(KEYS[1], 'r:')
end

local waited = redis.call('ZREM', KEYS[4], ARGV[1]) == 1
if waited then
  redis.call('LREM', KEYS[5], 1, ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
end
if ARGV[2] == 'q' then
  if waited then wake() end
  return 0
end
if ARGV[2] == 'w' then
  local v = redis.call('GET', KEYS[1])
  if not owns(v, ARGV[1]) then
    if waited then wake() end
    -- No hold, and the counter still at its fence: this very call's
    -- earlier run released it (its answer lost, go-redis sent it again),
    -- or it expired with nobody taking the lock since (see release.lua).
    if not v and ARGV[3] ~= '' and redis.call('GET', KEYS[7]) == ARGV[3] then
      return 1
    end
    -- The mark of its fence: its earlier run released, and a waiter took
    -- the lock before go-redis sent it again (see release.lua).
    if KEYS[8] and ARGV[3] ~= '' and rel_has(KEYS[8], ARGV[3]) then
      return 1
    end
    return 0
  end
  if taken_since(KEYS[7], ARGV[3]) then
    return 0
  end
  redis.call('DEL', KEYS[1])
  if KEYS[8] and ARGV[3] ~= '' then
    -- Every write release wakes whoever waits: readers and writers alike
    -- take the lock at once, so each leaves its mark.
    rel_add(KEYS[8], ARGV[3])
  end
else
  local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not exp then
    -- Released by an earlier run of this call (its answer lost, go-redis
    -- sent it again), whoever took the lock since.
    if KEYS[8] and redis.call('EXISTS', KEYS[8]) == 1 then
      return 1
    end
    return 0
  end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  if tonumber(exp) < now then
    return 0
  end
  if KEYS[8] then
    redis.call('SET', KEYS[8], '1', 'PX', 15000)
  end
end
wake()
return 1
