-- One maintenance batch, at the store's clock, over the rows whose
-- `check_at` has come (one index, in its order). Each is, by what it holds:
-- - a tombstone older than the retention ($1 ms), or a claim abandoned
--   with its lease that long ago: deleted;
-- - a completed record past its window: a tombstone (response dropped;
--   fingerprint and resource kept), looked at again at the retention's end;
-- - anything else (a window still open because the response came late, a
--   claim still in flight, a young tombstone): looked at again when it can
--   next change. A claim whose lease runs is looked at when it ends;
--   completed later than that, its response is dropped at the retention's
--   end instead of the window's.
-- The three cases are disjoint, so no row is written twice. SKIP LOCKED
-- keeps the task out of the way of requests and of another instance's
-- task. $1 retention ms, $2 batch size.
WITH due AS (
    SELECT scope, operation, key FROM idempotency_records
    WHERE COALESCE(check_at, created_at) <= statement_timestamp()
    ORDER BY COALESCE(check_at, created_at)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM idempotency_records r
    USING due d
    WHERE r.scope = d.scope AND r.operation = d.operation AND r.key = d.key
      AND ((r.status = 'tombstone'
            AND r.created_at < statement_timestamp() - $1 * interval '1 millisecond')
        OR (r.status = 'in_flight'
            AND r.lease_until < statement_timestamp() - $1 * interval '1 millisecond'))
    RETURNING 1
), trimmed AS (
    UPDATE idempotency_records r
    SET status = 'tombstone', response_status = NULL, response_headers = NULL, response_body = NULL,
        check_at = r.created_at + $1 * interval '1 millisecond'
    FROM due d
    WHERE r.scope = d.scope AND r.operation = d.operation AND r.key = d.key
      AND r.status = 'completed' AND r.replay_until <= statement_timestamp()
    RETURNING 1
), rescheduled AS (
    UPDATE idempotency_records r
    SET check_at = CASE
        WHEN r.status = 'completed' THEN r.replay_until
        WHEN r.status = 'tombstone' THEN r.created_at + $1 * interval '1 millisecond'
        WHEN r.lease_until > statement_timestamp() THEN r.lease_until
        ELSE r.lease_until + $1 * interval '1 millisecond' END
    FROM due d
    WHERE r.scope = d.scope AND r.operation = d.operation AND r.key = d.key
      AND NOT (r.status = 'completed' AND r.replay_until <= statement_timestamp())
      AND NOT (r.status = 'tombstone'
               AND r.created_at < statement_timestamp() - $1 * interval '1 millisecond')
      AND NOT (r.status = 'in_flight'
               AND r.lease_until < statement_timestamp() - $1 * interval '1 millisecond')
    RETURNING 1
)
SELECT (SELECT count(*) FROM trimmed) AS trimmed, (SELECT count(*) FROM deleted) AS deleted,
       (SELECT count(*) FROM rescheduled) AS rescheduled
