-- Read a lease for operators.
-- KEYS[1] lease   KEYS[2] fence counter   KEYS[3] fair queue
-- KEYS[4] its entry deadlines   KEYS[5] its arrival times
-- Returns {value or false, pttl ms, fence or false, queued waiters, ms the
-- first of them has waited}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  redis.call('LLEN', KEYS[3]), queue_age(KEYS[3], KEYS[4], KEYS[5], now_ms())}
