-- The caller's order with its payment, or no order row for someone else's;
-- no row at all for an unknown token. $1 token_hash, $2 order id.
-- Every index's leading columns come from parameters or a scalar subquery,
-- not from a join column (see create_order.sql). The payment is the
-- order's charge, found by the outbox's primary key (scope, id); its
-- resource_id confirms it is this order's.
WITH caller AS (
    SELECT account_id FROM api_tokens WHERE token_hash = $1::bytea AND revoked_at IS NULL
)
SELECT o.id, o.sku, o.quantity, o.reference, o.amount_cents, o.currency, o.created_at,
       m.status AS payment_status, m.result AS payment_result,
       m.last_error AS payment_error, m.attempts AS payment_attempts
FROM caller c
LEFT JOIN orders o ON o.account_id = (SELECT account_id FROM caller) AND o.id = $2::uuid
LEFT JOIN outbox m
  ON m.scope = (SELECT account_id::text FROM caller) AND m.id = o.charge_message
 AND m.resource_id = $2::uuid::text
