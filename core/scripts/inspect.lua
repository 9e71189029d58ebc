-- Read a lease for operators.
-- KEYS[1] lease   KEYS[2] fence counter
-- Returns {value or false, pttl ms, fence or false}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
