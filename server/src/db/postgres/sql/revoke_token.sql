-- Revokes a token unless it already is; either way returns when it was
-- revoked and whether this statement did it. No row for an unknown id.
-- $1 token id.
WITH old AS (
    SELECT id, revoked_at FROM api_tokens WHERE id = $1::uuid FOR UPDATE
), revoked AS (
    UPDATE api_tokens t SET revoked_at = statement_timestamp()
    FROM old
    WHERE t.id = old.id AND old.revoked_at IS NULL
    RETURNING t.revoked_at
)
SELECT coalesce((SELECT revoked_at FROM revoked), old.revoked_at) AS revoked_at,
       EXISTS (SELECT 1 FROM revoked) AS now
FROM old
