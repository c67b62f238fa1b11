-- The refund of one key of a scope. ?1 scope, ?2 key.
SELECT id, idempotency_key, charge_id, order_id, amount_cents, currency, created_at
FROM provider_refunds
WHERE scope = ?1 AND idempotency_key = ?2
