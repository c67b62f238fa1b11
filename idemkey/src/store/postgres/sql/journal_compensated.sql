-- A done step marked compensated.
UPDATE idemkey_steps
SET state = 'compensated', compensated_at = statement_timestamp()
WHERE scope = $3::text AND flow_id = $1::uuid AND idx = $2::int4 AND state = 'done'
