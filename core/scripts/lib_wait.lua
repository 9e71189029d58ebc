-- A mutex's waiters queue in one sorted set, W ("<lease>:w"): each member
-- is "<token>|<grant channel>", scored by the server time it joined, in µs,
-- so the lowest score has waited longest. The grant channel is its
-- Client's own: a grant to the waiter is published there, and reaches one
-- process, not every process subscribed to the key. Beside W, a sorted set
-- A ("<lease>:w:a") keeps the Clients that have waiters in W alive: member
-- the grant channel, scored by when it lapses (server ms). A Client sets
-- its score when it first queues a waiter, and its periodic touch
-- (queue_touch.lua, one per Client and key) pushes it on and drops the
-- Clients that lapsed. A member of W whose Client is not in A belongs to a
-- process that died, and is skipped. Both are declared keys of every
-- script that reads them, under the key's hash tag.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- wait_split returns a member's token and grant channel.
local function wait_split(m)
  return string.match(m, '^([^|]*)|(.*)$')
end

-- wait_join queues member (if not queued yet) in w. a, when set, is A:
-- the member's Client is (re)entered there for entry ms.
local function wait_join(w, member, a, chan, entry)
  local now = now_us()
  redis.call('ZADD', w, 'NX', now, member)
  if a then
    redis.call('ZADD', a, math.floor(now / 1000) + entry, chan)
    redis.call('PEXPIRE', a, 2 * entry)
  end
end

-- wait_grant hands the lease to the longest-waiting live member of w, if
-- any: a new fence, the lease set to "<token>|" for claim ms (a grant not
-- yet claimed; a claimed lease without metadata is the bare token, which
-- Inspect tells apart), a message "g:<token>|<lease>" on the grantee's
-- channel and "g:<token>" on the lease's observer channel "<lease>:o".
-- The waiter next in line hears "n:<token>|<lease>" on its own channel: it
-- looks again once the claim window has passed, so a grantee that died
-- meanwhile costs one claim window. Members whose Client is gone (not in
-- A) are dropped on the way. Returns 'granted'; 'me' if the member it came to
-- was me (taken out of w, not granted: the caller takes the lease); nil if
-- nobody waits.
local function wait_grant(lease, fence, w, a, claim, retention, me)
  while true do
    local m = redis.call('ZPOPMIN', w)
    if not m[1] then return nil end
    if m[1] == me then return 'me' end
    local tok, chan = wait_split(m[1])
    if tok and redis.call('ZSCORE', a, chan) then
      next_fence(fence, retention)
      redis.call('SET', lease, tok .. '|', 'PX', claim)
      pub_to(lease, chan, 'g:' .. tok .. '|' .. lease)
      pub(lease .. ':o', 'g:' .. tok)
      local nxt = redis.call('ZRANGE', w, 0, 0)[1]
      if nxt then
        local t2, c2 = wait_split(nxt)
        if t2 then pub_to(lease, c2, 'n:' .. t2 .. '|' .. lease) end
        if c2 == chan then
          -- The next is the grantee's Client's too: if that process died,
          -- it hears neither, so the first waiter of another Client
          -- behind them (within 64) is told as well.
          for _, m2 in ipairs(redis.call('ZRANGE', w, 1, 64)) do
            local t3, c3 = wait_split(m2)
            if t3 and c3 ~= chan then
              pub_to(lease, c3, 'n:' .. t3 .. '|' .. lease)
              break
            end
          end
        end
      end
      return 'granted'
    end
  end
end
