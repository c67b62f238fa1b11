-- Logs one request to the provider simulator, or one run of one of its
-- handlers. ?1 scope, ?2 kind, ?3 idempotency key, ?4 order id (or NULL),
-- ?5 effect.
INSERT INTO provider_requests (scope, kind, idempotency_key, order_id, effect, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
