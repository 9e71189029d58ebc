-- Read the value and version of the hash KEYS[1] in one round trip.
return redis.call('HMGET', KEYS[1], 'v', 'ver')
