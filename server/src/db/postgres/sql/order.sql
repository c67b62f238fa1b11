-- The caller's order, or no order row for someone else's; no row at all for
-- an unknown token. $1 token_hash, $2 order id.
SELECT o.id, o.sku, o.quantity, o.created_at
FROM api_tokens c
LEFT JOIN orders o ON o.account_id = c.account_id AND o.id = $2::uuid
WHERE c.token_hash = $1::bytea AND c.revoked_at IS NULL
