-- A scope's request log, in arrival order: one effect's rows, or every
-- row when ?2 is NULL. ?1 scope, ?2 effect (or NULL).
SELECT seq, kind, effect, idempotency_key, order_id, created_at
FROM provider_requests
WHERE scope = ?1 AND (?2 IS NULL OR effect = ?2)
ORDER BY seq
