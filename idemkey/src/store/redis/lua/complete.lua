-- Stores the response of in-flight claim ARGV[1], replayed for ARGV[2] ms
-- from the store's clock; answers 1, or 0 when the record no longer carries
-- that claim in flight. The record expires when its window is over or its
-- retention (ARGV[3] ms from creation) is, whichever is later: the moment
-- trim would delete its tombstone elsewhere.
-- KEYS[1] the record; ARGV: claim, replay ms, retention ms, status,
-- headers (JSON), '1' and the body (or '0' and ''), '1' and the resource
-- id (or '0' and '').
local current = redis.call('HMGET', KEYS[1], 'claim', 'status', 'created')
if current[1] == ARGV[1] and current[2] == 'completed' then
  -- This very completion, sent again after a lost reply.
  return 1
end
if current[1] ~= ARGV[1] or current[2] ~= 'in_flight' then
  return 0
end
local now = now_ms()
local replay_until = now + tonumber(ARGV[2])
redis.call('HDEL', KEYS[1], 'lease_until', 'rb', 'rid')
redis.call('HSET', KEYS[1], 'status', 'completed', 'replay_until', ms(replay_until),
  'rs', ARGV[4], 'rh', ARGV[5])
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'rb', ARGV[7])
end
if ARGV[8] == '1' then
  redis.call('HSET', KEYS[1], 'rid', ARGV[9])
end
local forget = math.max(replay_until, (tonumber(current[3]) or now) + tonumber(ARGV[3]))
redis.call('PEXPIREAT', KEYS[1], ms(forget))
return 1
