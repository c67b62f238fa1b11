-- Refunds a charge the caller has read (its order, amount and currency
-- copied), unless the key has a refund or the charge has one under another
-- key: ON CONFLICT covers both unique keys, and the row is returned only
-- when this statement made it. A conflict with an uncommitted insert waits
-- for it; the caller then reads which of the two it was.
-- $1 id, $2 scope, $3 key, $4 charge id, $5 order id, $6 amount, $7 currency.
INSERT INTO provider_refunds (id, scope, idempotency_key, charge_id, order_id, amount_cents, currency)
VALUES ($1::uuid, $2::text, $3::text, $4::uuid, $5::uuid, $6::bigint, $7::text)
ON CONFLICT DO NOTHING
RETURNING id, idempotency_key, charge_id, order_id, amount_cents, currency, created_at
