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
-- task. What to do with a row is decided once, on the version `due` locked,
-- and the changes find that version by its physical address (`ctid`): the
-- lock holds it in place until the transaction ends, so three walks of the
-- primary key per row (one per case) are not needed. A version that a
-- transaction committed after this statement's snapshot is not visible to
-- the changes by its address, so it is left for the next batch, never
-- changed on a stale reading. $1 retention ms, $2 batch size.
WITH due AS (
    SELECT ctid AS tid,
        CASE
            WHEN (status = 'tombstone'
                  AND created_at < statement_timestamp() - $1 * interval '1 millisecond')
              OR (status = 'in_flight'
                  AND lease_until < statement_timestamp() - $1 * interval '1 millisecond')
                THEN 'delete'
            WHEN status = 'completed' AND replay_until <= statement_timestamp() THEN 'trim'
            ELSE 'reschedule' END AS action
    FROM idempotency_records
    WHERE COALESCE(check_at, created_at) <= statement_timestamp()
    ORDER BY COALESCE(check_at, created_at)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM idempotency_records
    WHERE ctid = ANY (ARRAY(SELECT tid FROM due WHERE action = 'delete'))
    RETURNING 1
), changed AS (
    UPDATE idempotency_records r
    SET status = CASE WHEN d.action = 'trim' THEN 'tombstone' ELSE r.status END,
        response_status = CASE WHEN d.action = 'trim' THEN NULL ELSE r.response_status END,
        response_headers = CASE WHEN d.action = 'trim' THEN NULL ELSE r.response_headers END,
        response_body = CASE WHEN d.action = 'trim' THEN NULL ELSE r.response_body END,
        check_at = CASE
            WHEN d.action = 'trim' OR r.status = 'tombstone'
                THEN r.created_at + $1 * interval '1 millisecond'
            WHEN r.status = 'completed' THEN r.replay_until
            WHEN r.lease_until > statement_timestamp() THEN r.lease_until
            ELSE r.lease_until + $1 * interval '1 millisecond' END
    FROM due d
    WHERE r.ctid = d.tid AND d.action <> 'delete'
    RETURNING d.action
)
SELECT (SELECT count(*) FROM changed WHERE action = 'trim') AS trimmed,
       (SELECT count(*) FROM deleted) AS deleted,
       (SELECT count(*) FROM changed WHERE action = 'reschedule') AS rescheduled
