-- Every refund of a scope, oldest first. ?1 scope.
SELECT id, idempotency_key, charge_id, order_id, amount_cents, currency, created_at
FROM provider_refunds
WHERE scope = ?1
ORDER BY rowid
