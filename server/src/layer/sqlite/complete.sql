-- Stores the response of claim ?4, only while that claim holds the row.
UPDATE idempotency_leases
SET status = 'completed', lease_until = NULL, replay_until = ?5,
    response_status = ?6, response_headers = ?7, response_body = ?8
WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND claim = ?4 AND status = 'in_flight'
