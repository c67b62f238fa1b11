-- The confirmation of one key of a scope. $1 scope, $2 key.
SELECT id, idempotency_key, order_id, recipient, message, created_at
FROM provider_confirmations
WHERE scope = $1::text AND idempotency_key = $2::text
