-- The tokens a server saw authenticate since its last flush, at the
-- database's clock: one statement per interval, not one per request.
-- $1 token hashes.
UPDATE api_tokens SET last_used_at = statement_timestamp()
WHERE token_hash = ANY($1::bytea[])
