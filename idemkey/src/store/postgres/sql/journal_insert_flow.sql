-- A new execution, running at its first step.
INSERT INTO idemkey_flows (id, scope, operation, key, flow, state, position, input)
VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::int4, $8::text)
