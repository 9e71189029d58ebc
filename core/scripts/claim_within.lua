-- A claim refused when it arrives late, judged by this server's clock.
-- KEYS[1] the claim; ARGV[1] value, ARGV[2] TTL (ms), ARGV[3] the planned
-- instant (unix ms), ARGV[4] the window (ms). Returns 1 claimed, 2 taken
-- (the key holds a claim), 3 late (now > planned + window; nothing stored).
-- A claim lives its TTL or until just past planned + window, whichever
-- ends later, so every claim that arrives in time finds it.
if redis.replicate_commands then redis.replicate_commands() end -- TIME before a write, Redis < 5
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 2
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[3]) + tonumber(ARGV[4])
if now > deadline then
  return 3
end
local ttl = math.max(tonumber(ARGV[2]), deadline - now + 1)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return 1
