-- Creates the confirmation of (scope, key) unless the key has one (the
-- caller holds BEGIN IMMEDIATE and reads the key's confirmation next).
-- ?1 id, ?2 scope, ?3 key, ?4 order id, ?5 recipient, ?6 text.
INSERT INTO provider_confirmations (id, scope, idempotency_key, order_id, recipient, message, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
ON CONFLICT (scope, idempotency_key) DO NOTHING
