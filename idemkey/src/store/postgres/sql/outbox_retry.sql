-- Sends messages back to pending, due now, with a fresh budget of attempts
-- (their downstream key stays recorded, so the next attempt looks the
-- effect up first): one dead or failed message by id, or every dead letter.
-- A message older than the provider's key retention (at the store's clock)
-- stays where it is unless forced: the provider may have forgotten its key,
-- and a re-sent charge would be a second one.
-- $1 id, or NULL for every dead letter; $2 key retention ms; $3 force.
WITH candidates AS (
    SELECT scope, id,
           extract(epoch FROM statement_timestamp() - created_at) * 1000 >= $2::int8 AS too_old
    FROM outbox
    WHERE CASE WHEN $1::int8 IS NULL THEN status = 'dead'
               ELSE id = $1::int8 AND status IN ('dead', 'failed') END
    FOR UPDATE
), requeued AS (
    UPDATE outbox m
    SET status = 'pending', attempts = 0, available_at = statement_timestamp(),
        settled_at = NULL,
        last_error = CASE WHEN m.status = 'failed' THEN m.result ELSE m.last_error END,
        result = NULL
    FROM candidates c
    WHERE m.scope = c.scope AND m.id = c.id AND (NOT c.too_old OR $3::bool)
    RETURNING m.id
)
SELECT (SELECT count(*) FROM requeued) AS requeued,
       (SELECT coalesce(array_agg(id ORDER BY id), '{}'::int8[])
        FROM candidates WHERE too_old AND NOT $3::bool) AS too_old
