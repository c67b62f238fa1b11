-- Replaces a record with a new claim only while it still carries the claim
-- (ARGV[5]) and the status (ARGV[6]) the caller decided on: a record
-- completed, expired or taken over meanwhile is left alone. Answers 1 when
-- it replaced the record (or already had: a client may resend a script
-- whose reply it lost), 0 otherwise.
-- KEYS[1] the record; ARGV: fingerprint, new claim, lease ms, retention ms,
-- previous claim, previous status.
local current = redis.call('HMGET', KEYS[1], 'claim', 'status')
if current[1] == ARGV[2] then
  -- This very take-over, sent again after a lost reply.
  return 1
end
if current[1] ~= ARGV[5] or current[2] ~= ARGV[6] then
  return 0
end
local now = now_ms()
local lease_until = now + tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'claim', ARGV[2], 'status', 'in_flight',
  'created', ms(now), 'lease_until', ms(lease_until))
redis.call('PEXPIREAT', KEYS[1], ms(lease_until + tonumber(ARGV[4])))
return 1
