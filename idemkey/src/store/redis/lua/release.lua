-- Forgets in-flight claim ARGV[1] (its effect failed or answered a
-- temporary status); answers 1, or 0 when the record no longer carries
-- that claim in flight. KEYS[1] the record.
local current = redis.call('HMGET', KEYS[1], 'claim', 'status')
if current[1] ~= ARGV[1] or current[2] ~= 'in_flight' then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
