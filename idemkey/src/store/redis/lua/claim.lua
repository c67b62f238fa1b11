-- Claims a key: writes an in-flight record whose lease ends ARGV[3] ms after
-- the store's clock and answers {'won', now_ms}; or, when the key is taken,
-- answers {'taken', now_ms, field, value, ...} from the same atomic step
-- (no second round trip, no window between the two).
-- The record expires (PEXPIREAT) ARGV[4] ms after its lease, as trim
-- deletes an abandoned claim elsewhere.
-- KEYS[1] the record; ARGV: fingerprint, claim, lease ms, retention ms.
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 1 then
  local reply = redis.call('HGETALL', KEYS[1])
  table.insert(reply, 1, ms(now))
  table.insert(reply, 1, 'taken')
  return reply
end
local lease_until = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'claim', ARGV[2], 'status', 'in_flight',
  'created', ms(now), 'lease_until', ms(lease_until))
redis.call('PEXPIREAT', KEYS[1], ms(lease_until + tonumber(ARGV[4])))
return {'won', ms(now)}
