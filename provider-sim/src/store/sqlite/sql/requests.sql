-- A scope's request log, in arrival order. ?1 scope.
SELECT seq, kind, idempotency_key, order_id, created_at
FROM provider_requests
WHERE scope = ?1
ORDER BY seq
