-- A mutex's waiters queue in one sorted set, W ("<lease>:w"): each member
-- is "<token>|<grant channel>", scored by the server time it joined, in µs,
-- so the lowest score has waited longest. The grant channel is its
-- Client's own: a grant to the waiter is published there, and reaches one
-- process, not every process subscribed to the key. A Client with waiters
-- in W keeps one key alive for all of them, A ("<W>:a:<grant channel>",
-- under the same hash tag): the first waiter it queues sets it, and its
-- periodic touch (queue_touch.lua) refreshes it and W. A member whose A has
-- expired belongs to a process that died, and is skipped.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- wait_split returns a member's token and grant channel.
local function wait_split(m)
  return string.match(m, '^([^|]*)|(.*)$')
end

-- wait_alive_key names the key that keeps a Client's members of w alive.
local function wait_alive_key(w, chan)
  return w .. ':a:' .. chan
end

-- wait_join queues member (if not queued yet) in w. alive, when set, is
-- the Client's key to (re)set for entry ms.
local function wait_join(w, member, alive, entry)
  redis.call('ZADD', w, 'NX', now_us(), member)
  if alive then
    redis.call('SET', alive, '1', 'PX', entry)
  end
end

-- wait_grant hands the lease to the longest-waiting live member of w, if
-- any: a new fence, the lease set to "<token>|" for claim ms (a grant not
-- yet claimed; a claimed lease without metadata is the bare token, which
-- Inspect tells apart), a message "g:<token>|<lease>" on the grantee's
-- channel and "g:<token>" on the lease's observer channel "<lease>:o".
-- The waiter next in line hears "n:<token>|<lease>" on its own channel: it
-- looks again once the claim window has passed, so a grantee that died
-- meanwhile costs one claim window. Members whose Client is gone are
-- dropped on the way. Returns 'granted'; 'me' if the member it came to
-- was me (taken out of w, not granted: the caller takes the lease); nil if
-- nobody waits.
local function wait_grant(lease, fence, w, claim, retention, me)
  while true do
    local m = redis.call('ZPOPMIN', w)
    if not m[1] then return nil end
    if m[1] == me then return 'me' end
    local tok, chan = wait_split(m[1])
    if tok and redis.call('EXISTS', wait_alive_key(w, chan)) == 1 then
      next_fence(fence, retention)
      redis.call('SET', lease, tok .. '|', 'PX', claim)
      redis.call('PUBLISH', chan, 'g:' .. tok .. '|' .. lease)
      redis.call('PUBLISH', lease .. ':o', 'g:' .. tok)
      local nxt = redis.call('ZRANGE', w, 0, 0)[1]
      if nxt then
        local t2, c2 = wait_split(nxt)
        if t2 then redis.call('PUBLISH', c2, 'n:' .. t2 .. '|' .. lease) end
        if c2 == chan then
          -- The next is the grantee's Client's too: if that process died,
          -- it hears neither, so the first waiter of another Client
          -- behind them (within 64) is told as well.
          for _, m2 in ipairs(redis.call('ZRANGE', w, 1, 64)) do
            local t3, c3 = wait_split(m2)
            if t3 and c3 ~= chan then
              redis.call('PUBLISH', c3, 'n:' .. t3 .. '|' .. lease)
              break
            end
          end
        end
      end
      return 'granted'
    end
  end
end
