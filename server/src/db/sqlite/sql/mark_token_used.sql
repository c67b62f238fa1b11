-- A token a server saw authenticate since its last flush, at SQLite's
-- clock; every token of one flush in one transaction. ?1 token hash.
UPDATE api_tokens SET last_used_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE token_hash = ?1
