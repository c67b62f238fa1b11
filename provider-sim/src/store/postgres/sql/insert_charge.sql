-- Creates the charge of (scope, key), or returns the one the key already
-- has, so a re-executed request never charges twice. One row: the charge
-- and whether this statement created it. No row when a concurrent insert of
-- the same key committed after this statement's snapshot (the caller runs
-- it again). $1 id, $2 scope, $3 key, $4 order id, $5 amount, $6 currency.
WITH inserted AS (
    INSERT INTO provider_charges (id, scope, idempotency_key, order_id, amount_cents, currency)
    VALUES ($1::uuid, $2::text, $3::text, $4::uuid, $5::bigint, $6::text)
    ON CONFLICT (scope, idempotency_key) DO NOTHING
    RETURNING id, idempotency_key, order_id, amount_cents, currency, created_at
)
SELECT id, idempotency_key, order_id, amount_cents, currency, created_at, true AS created
FROM inserted
UNION ALL
SELECT id, idempotency_key, order_id, amount_cents, currency, created_at, false
FROM provider_charges
WHERE scope = $2::text AND idempotency_key = $3::text
  AND NOT EXISTS (SELECT 1 FROM inserted)
