-- An account's tokens, revoked ones included, oldest first: ids and times
-- only, never the hash. ?1 account id.
SELECT id, created_at, last_used_at, revoked_at
FROM api_tokens
WHERE account_id = ?1
ORDER BY created_at, id
