-- One maintenance batch. Completed records past their replay window become
-- tombstones (response dropped; fingerprint and resource kept); tombstones
-- created before the retention cut-off are deleted. SKIP LOCKED keeps the
-- task out of the way of requests and of another instance's task.
-- $1 now, $2 forget_before, $3 batch size.
WITH to_trim AS (
    SELECT account_id, operation, key FROM idempotency_records
    WHERE status = 'completed' AND replay_until <= $1::timestamptz
    LIMIT $3::int8
    FOR UPDATE SKIP LOCKED
), trimmed AS (
    UPDATE idempotency_records r
    SET status = 'tombstone', response_status = NULL, response_headers = NULL, response_body = NULL
    FROM to_trim t
    WHERE r.account_id = t.account_id AND r.operation = t.operation AND r.key = t.key
    RETURNING 1
), to_delete AS (
    SELECT account_id, operation, key FROM idempotency_records
    WHERE status = 'tombstone' AND created_at < $2::timestamptz
    LIMIT $3::int8
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM idempotency_records r
    USING to_delete d
    WHERE r.account_id = d.account_id AND r.operation = d.operation AND r.key = d.key
    RETURNING 1
)
SELECT (SELECT count(*) FROM trimmed) AS trimmed, (SELECT count(*) FROM deleted) AS deleted
