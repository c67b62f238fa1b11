-- The account a token belongs to. ?1 token hash.
SELECT account_id FROM api_tokens WHERE token_hash = ?1
