-- Revokes a token unless it already is; returns when it was revoked and
-- whether this statement did it (run inside BEGIN IMMEDIATE, after reading
-- the row). ?1 token id.
UPDATE api_tokens SET revoked_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id = ?1 AND revoked_at IS NULL
RETURNING revoked_at
