-- Makes a refund the caller has checked under BEGIN IMMEDIATE (the key
-- has none, the charge exists with this amount and has none).
-- ?1 id, ?2 scope, ?3 key, ?4 charge id, ?5 order id, ?6 amount, ?7 currency.
INSERT INTO provider_refunds (id, scope, idempotency_key, charge_id, order_id, amount_cents, currency, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
