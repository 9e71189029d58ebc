-- Delete a lease this token holds and hand the key on: to the first live
-- fair waiter, if any queue (a grant: a new fence and a short claim window,
-- and a message naming the grantee, sent to its Client's grant channel if
-- it gave one), else to whoever comes first (a
-- message "r:<nonce>" that wakes one waiter per client). Redlock sends one
-- nonce, unique to the release, to all its nodes, and the notifier drops
-- its repeats; a single server sends "r:" alone, never dropped. A token that does not
-- hold the lease leaves the fair queue instead (a waiter giving up).
-- KEYS[1] lease (also the notification channel)  KEYS[2] fence counter
-- KEYS[3] queue  KEYS[4] queue deadlines  KEYS[5] queue arrival times
-- ARGV[1] token  ARGV[2] claim window ms  ARGV[3] fence retention ms
-- ARGV[4] release nonce (Redlock), or ''
-- Returns 1 released, 0 not held.
if not owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  leave_queue(KEYS[3], KEYS[4], ARGV[1], KEYS[5])
  return 0
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  prune(KEYS[3], KEYS[4], now_ms(), KEYS[5])
  local head = redis.call('LPOP', KEYS[3])
  if head then
    redis.call('ZREM', KEYS[4], head)
    local since = redis.call('HGET', KEYS[5], head)
    redis.call('HDEL', KEYS[5], head)
    next_fence(KEYS[2], ARGV[3])
    -- "<token>|": a grant not yet claimed (a claimed lease without
    -- metadata is the bare token), which Inspect tells apart.
    redis.call('SET', KEYS[1], head .. '|', 'PX', ARGV[2])
    -- To the grantee's Client alone when it gave its channel ("g:<token>|
    -- <lease>"), else on the lease's channel ("g:<token>").
    local chan = since and string.match(since, '^%d+|(.+)$')
    if chan then
      redis.call('PUBLISH', chan, 'g:' .. head .. '|' .. KEYS[1])
      -- Observers of the key (Observe) listen on "<lease>:o" too: a
      -- handoff they would not hear on the lease's channel.
      redis.call('PUBLISH', KEYS[1] .. ':o', 'g:' .. head)
    else
      redis.call('PUBLISH', KEYS[1], 'g:' .. head)
    end
    -- The waiter next in line hears it is ("n:<token>|<lease>", on its own
    -- Client's channel): it looks again once the grant's claim window has
    -- passed, so a head that died costs one claim window.
    local nxt = redis.call('LINDEX', KEYS[3], 0)
    if nxt then
      local s2 = redis.call('HGET', KEYS[5], nxt)
      local chan2 = s2 and string.match(s2, '^%d+|(.+)$')
      if chan2 then
        redis.call('PUBLISH', chan2, 'n:' .. nxt .. '|' .. KEYS[1])
      end
    end
    return 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1], 'r:' .. ARGV[4])
return 1
