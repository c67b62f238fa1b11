-- What a key holds, with the store's clock (TIME, never the caller's):
-- {now_ms, field, value, ...}, just {now_ms} when the key holds nothing.
-- KEYS[1] the record.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, string.format('%.0f', now))
return reply
