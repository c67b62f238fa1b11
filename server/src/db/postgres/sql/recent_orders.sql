-- The caller's newest orders, newest first: one row with a NULL id when the
-- account has none; no row at all for an unknown token.
-- $1 token_hash, $2 how many.
SELECT o.id, o.sku, o.quantity, o.created_at
FROM api_tokens c
LEFT JOIN LATERAL (
    SELECT id, sku, quantity, created_at
    FROM orders
    WHERE account_id = c.account_id
    ORDER BY created_at DESC, id DESC
    LIMIT $2::bigint
) o ON true
WHERE c.token_hash = $1::bytea AND c.revoked_at IS NULL
