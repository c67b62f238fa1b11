-- A step recorded (once: the primary key refuses a second recording).
INSERT INTO idemkey_steps (scope, flow_id, idx, name, state, output, attempts, downstream_key)
VALUES ($8::text, $1::uuid, $2::int4, $3::text, $4::text, $5::text, $6::int4, $7::text)
