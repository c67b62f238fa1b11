-- An effect to deliver, in the transaction of the change it belongs to;
-- its id, for the caller to find it by the primary key (scope, id).
-- $1 scope, $2 operation, $3 key, $4 effect, $5 resource id, $6 payload.
INSERT INTO outbox (scope, operation, key, effect, resource_id, payload)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text)
RETURNING id
