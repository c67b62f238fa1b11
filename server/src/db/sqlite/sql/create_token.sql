-- Adds a token to an existing account; nothing when there is none.
-- ?1 token id, ?2 token hash, ?3 account id.
INSERT INTO api_tokens (id, token_hash, account_id, created_at)
SELECT ?1, ?2, id, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
FROM accounts WHERE id = ?3
