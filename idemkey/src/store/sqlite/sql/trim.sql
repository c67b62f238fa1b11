-- One maintenance batch, first statement: completed records past their
-- window become tombstones. ?1 batch size.
UPDATE idempotency_records
SET status = 'tombstone', response_status = NULL, response_headers = NULL, response_body = NULL
WHERE rowid IN (SELECT rowid FROM idempotency_records
                WHERE status = 'completed' AND replay_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) LIMIT ?1)
