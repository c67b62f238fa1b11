-- Adds a token to an existing account; no row when there is none.
-- $1 token id, $2 token hash, $3 account id.
INSERT INTO api_tokens (id, token_hash, account_id)
SELECT $1::uuid, $2::bytea, id FROM accounts WHERE id = $3::uuid
RETURNING id
