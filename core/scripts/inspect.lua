-- Read a lease for operators.
-- KEYS[1] lease   KEYS[2] fence counter   KEYS[3] fair queue
-- Returns {value or false, pttl ms, fence or false, queued waiters}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  redis.call('LLEN', KEYS[3])}
