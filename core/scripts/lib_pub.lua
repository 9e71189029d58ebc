-- Notifications (classic pub/sub). pub publishes msg on ch, a channel of
-- the script's own key: its lease's, or its observers' ("<lease>:o").
-- pub_to publishes msg, about lease, to the Client whose grant channel is
-- client. The sharded twin of these (lib_pub_sharded.lua) keeps every
-- message in the key's hash slot.
local function pub(ch, msg)
  redis.call('PUBLISH', ch, msg)
end

local function pub_to(lease, client, msg)
  redis.call('PUBLISH', client, msg)
end
