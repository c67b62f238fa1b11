-- The caller's newest orders with their payments, newest first: one row
-- with a NULL id when the account has none; no row at all for an unknown
-- token. $1 token_hash, $2 how many. Each payment is the order's charge,
-- found by the outbox's primary key (scope, id); its resource_id confirms
-- it is that order's.
SELECT o.id, o.sku, o.quantity, o.reference, o.amount_cents, o.currency, o.created_at,
       m.status AS payment_status, m.result AS payment_result,
       m.last_error AS payment_error, m.attempts AS payment_attempts
FROM api_tokens c
LEFT JOIN LATERAL (
    SELECT id, sku, quantity, reference, amount_cents, currency, created_at, charge_message
    FROM orders
    WHERE account_id = c.account_id
    ORDER BY created_at DESC, id DESC
    LIMIT $2::bigint
) o ON true
LEFT JOIN outbox m
  ON m.scope = c.account_id::text AND m.id = o.charge_message AND m.resource_id = o.id::text
WHERE c.token_hash = $1::bytea AND c.revoked_at IS NULL
ORDER BY o.created_at DESC, o.id DESC
