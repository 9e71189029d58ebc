-- A claim refused when it arrives late, judged by this server's clock.
-- KEYS[1] the claim, KEYS[2] its id key ("<claim>:c"; same hash tag);
-- ARGV[1] value, ARGV[2] TTL (ms), ARGV[3] the planned instant (unix ms),
-- ARGV[4] the window (ms), ARGV[5] the claim's id (random, one per call),
-- ARGV[6] the longest the id is kept (ms). Returns 1 claimed, 2 taken (the
-- key holds a claim), 3 late (now > planned + window; nothing stored).
-- A claim lives its TTL or until just past planned + window, whichever
-- ends later, so every claim that arrives in time finds it.
--
-- A claim that finds the key and its own id is this claim sent again (a
-- resend by go-redis after a lost answer, MaxRetries): it answers 1 again,
-- not 2 — which told the only claimant another had the claim, so nobody
-- ran the tick (claim.lua says more).
if redis.replicate_commands then redis.replicate_commands() end -- TIME before a write, Redis < 5
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('GET', KEYS[2]) == ARGV[5] then
    return 1
  end
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
redis.call('SET', KEYS[2], ARGV[5], 'PX', math.min(ttl, tonumber(ARGV[6])))
return 1
