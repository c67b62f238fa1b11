-- The caller's order with its payment, or no order row for someone else's;
-- no row at all for an unknown token. $1 token_hash, $2 order id.
SELECT o.id, o.sku, o.quantity, o.reference, o.amount_cents, o.currency, o.created_at,
       m.status AS payment_status, m.result AS payment_result,
       m.last_error AS payment_error, m.attempts AS payment_attempts
FROM api_tokens c
LEFT JOIN orders o ON o.account_id = c.account_id AND o.id = $2::uuid
LEFT JOIN outbox m
  ON m.scope = c.account_id::text AND m.resource_id = o.id::text AND m.effect = 'charge'
WHERE c.token_hash = $1::bytea AND c.revoked_at IS NULL
