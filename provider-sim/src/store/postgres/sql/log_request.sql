-- Logs one request to the provider simulator, or one run of its charge
-- handler. $1 scope, $2 kind, $3 idempotency key, $4 order id (or NULL).
INSERT INTO provider_requests (scope, kind, idempotency_key, order_id)
VALUES ($1::text, $2::text, $3::text, $4::uuid)
