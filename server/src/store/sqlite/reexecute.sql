-- Policy `reexecute`: replace the expired record (same fingerprint, window
-- over at ?10, or a tombstone). Parameters as in claim.sql, plus ?10 now.
UPDATE idempotency_records
SET status = 'completed', response_status = 201, response_headers = ?6,
    response_body = ?5, created_at = ?7, replay_until = ?8, lease_until = NULL,
    resource_id = ?9
WHERE account_id = ?1 AND operation = ?2 AND key = ?3 AND fingerprint = ?4
  AND (status = 'tombstone'
       OR (status = 'completed' AND replay_until <= ?10)
       OR (status = 'in_flight' AND lease_until <= ?10))
