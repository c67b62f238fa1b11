-- One maintenance batch, at the store's clock. Completed records past
-- their window become tombstones (response dropped; fingerprint and
-- resource kept); tombstones, and claims abandoned with their lease, older
-- than the retention are deleted. SKIP LOCKED keeps the task out of the way
-- of requests and of another instance's task.
-- $1 retention ms, $2 batch size.
WITH to_trim AS (
    SELECT scope, operation, key FROM idempotency_records
    WHERE status = 'completed' AND replay_until <= statement_timestamp()
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), trimmed AS (
    UPDATE idempotency_records r
    SET status = 'tombstone', response_status = NULL, response_headers = NULL, response_body = NULL
    FROM to_trim t
    WHERE r.scope = t.scope AND r.operation = t.operation AND r.key = t.key
    RETURNING 1
), old_tombstones AS (
    SELECT scope, operation, key FROM idempotency_records
    WHERE status = 'tombstone'
      AND created_at < statement_timestamp() - $1 * interval '1 millisecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), abandoned AS (
    SELECT scope, operation, key FROM idempotency_records
    WHERE status = 'in_flight'
      AND lease_until < statement_timestamp() - $1 * interval '1 millisecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM idempotency_records r
    USING (SELECT * FROM old_tombstones UNION ALL SELECT * FROM abandoned) d
    WHERE r.scope = d.scope AND r.operation = d.operation AND r.key = d.key
    RETURNING 1
)
SELECT (SELECT count(*) FROM trimmed) AS trimmed, (SELECT count(*) FROM deleted) AS deleted
