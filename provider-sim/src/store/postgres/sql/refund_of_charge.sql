-- The refund of one charge of a scope (at most one). $1 scope, $2 charge id.
SELECT id, idempotency_key, charge_id, order_id, amount_cents, currency, created_at
FROM provider_refunds
WHERE scope = $1::text AND charge_id = $2::uuid
