-- The charge of a scope with this id (a refund's charge). $1 scope, $2 id.
SELECT id, idempotency_key, order_id, amount_cents, currency, created_at
FROM provider_charges
WHERE scope = $1::text AND id = $2::uuid
