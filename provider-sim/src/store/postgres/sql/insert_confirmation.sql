-- Creates the confirmation of (scope, key), or returns the one the key
-- already has, so a re-executed request never sends twice (as
-- insert_charge.sql). No row when a concurrent insert of the same key
-- committed after this statement's snapshot (the caller runs it again).
-- $1 id, $2 scope, $3 key, $4 order id, $5 recipient, $6 text.
WITH inserted AS (
    INSERT INTO provider_confirmations (id, scope, idempotency_key, order_id, recipient, message)
    VALUES ($1::uuid, $2::text, $3::text, $4::uuid, $5::text, $6::text)
    ON CONFLICT (scope, idempotency_key) DO NOTHING
    RETURNING id, idempotency_key, order_id, recipient, message, created_at
)
SELECT id, idempotency_key, order_id, recipient, message, created_at, true AS created
FROM inserted
UNION ALL
SELECT id, idempotency_key, order_id, recipient, message, created_at, false
FROM provider_confirmations
WHERE scope = $2::text AND idempotency_key = $3::text
  AND NOT EXISTS (SELECT 1 FROM inserted)
