-- A claim: store a record only if none is stored, and know this claim again.
-- KEYS[1] the record, KEYS[2] the claim's id key ("<record>:c"; same hash
-- tag); ARGV[1] value, ARGV[2] TTL (ms), ARGV[3] the claim's id (random,
-- one per call), ARGV[4] the id's TTL (ms). Returns 1 claimed, 0 taken.
--
-- A claim that finds a record and its own id is this claim sent again —
-- go-redis resends a command whose connection broke before the answer
-- came (MaxRetries) — and answers 1 again: SET NX answered 0 to it, and
-- the only claimant was told another had the claim. The id is kept only
-- as long as a resend may come (its TTL, at most a minute).
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('GET', KEYS[2]) == ARGV[3] then
    return 1
  end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
