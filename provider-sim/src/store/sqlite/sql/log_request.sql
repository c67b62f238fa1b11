-- Logs one request to the provider simulator, or one run of its charge
-- handler. ?1 scope, ?2 kind, ?3 idempotency key, ?4 order id (or NULL).
INSERT INTO provider_requests (scope, kind, idempotency_key, order_id, created_at)
VALUES (?1, ?2, ?3, ?4, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
