-- Messages for an operator, oldest first: all, or those of one status.
-- $1 status (or NULL), $2 how many.
SELECT id, scope, effect, resource_id, status, attempts, downstream_key, result, last_error,
       created_at
FROM outbox
WHERE $1::text IS NULL OR status = $1::text
ORDER BY id
LIMIT $2::int8
