-- Notifications (sharded pub/sub, Redis >= 7): every message stays in the
-- script's own hash slot, so a Cluster delivers it from that slot's
-- master alone instead of broadcasting it to every node. pub publishes msg
-- on ch, a channel of the script's key (its lease's, or its observers').
-- pub_to publishes msg, about lease, to the Client whose grant channel is
-- client, on that Client's channel for this key, "<lease>|<client>": it
-- shares the lease's hash tag, and the Client subscribes it with the
-- lease's channel. A server without SPUBLISH (Redis < 7) refuses it, and
-- the message goes out the classic way, where such a server's Clients
-- listen (they fell back to SUBSCRIBE).
local function pub(ch, msg)
  local r = redis.pcall('SPUBLISH', ch, msg)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', ch, msg)
  end
end

local function pub_to(lease, client, msg)
  local r = redis.pcall('SPUBLISH', lease .. '|' .. client, msg)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', client, msg)
  end
end
