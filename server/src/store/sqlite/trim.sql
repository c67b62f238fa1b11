-- One maintenance batch (two statements in one transaction): completed
-- records past their window become tombstones; old tombstones go.
-- ?1 now, ?2 forget_before, ?3 batch size.
UPDATE idempotency_records
SET status = 'tombstone', response_status = NULL, response_headers = NULL, response_body = NULL
WHERE rowid IN (SELECT rowid FROM idempotency_records
                WHERE status = 'completed' AND replay_until <= ?1 LIMIT ?3);
