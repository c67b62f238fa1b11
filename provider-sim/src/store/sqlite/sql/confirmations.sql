-- Every confirmation of a scope, oldest first. ?1 scope.
SELECT id, idempotency_key, order_id, recipient, message, created_at
FROM provider_confirmations
WHERE scope = ?1
ORDER BY rowid
