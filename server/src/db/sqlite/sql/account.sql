-- The account a token belongs to, unless revoked. ?1 token hash.
SELECT account_id FROM api_tokens WHERE token_hash = ?1 AND revoked_at IS NULL
