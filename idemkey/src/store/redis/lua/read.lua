-- What a key holds, with the store's clock (TIME, never the caller's):
-- {now_ms, field, value, ...}, just {now_ms} when the key holds nothing.
-- KEYS[1] the record.
local now = now_ms()
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, ms(now))
return reply
