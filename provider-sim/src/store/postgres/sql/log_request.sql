-- Logs one request to the provider simulator, or one run of one of its
-- handlers. $1 scope, $2 kind, $3 idempotency key, $4 order id (or NULL),
-- $5 effect.
INSERT INTO provider_requests (scope, kind, idempotency_key, order_id, effect)
VALUES ($1::text, $2::text, $3::text, $4::uuid, $5::text)
