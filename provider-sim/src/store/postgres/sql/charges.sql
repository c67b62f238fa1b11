-- Every charge of a scope, oldest first. $1 scope.
SELECT id, idempotency_key, order_id, amount_cents, currency, created_at
FROM provider_charges
WHERE scope = $1::text
ORDER BY seq
