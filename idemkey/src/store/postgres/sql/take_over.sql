-- Replaces a row with a new claim only while it still carries the claim
-- ($7) and the status ($8) the caller decided on: a row completed, trimmed
-- or taken over meanwhile is left alone. A concurrent taker blocks on the
-- row lock, then re-checks the condition against the new row.
-- $1 scope, $2 operation, $3 key, $4 fingerprint, $5 new claim,
-- $6 lease ms, $7 previous claim, $8 previous status, $9 replay ms.
UPDATE idempotency_records
SET fingerprint = $4, claim = $5, status = 'in_flight', created_at = statement_timestamp(),
    lease_until = statement_timestamp() + $6 * interval '1 millisecond', replay_until = NULL,
    response_status = NULL, response_headers = NULL, response_body = NULL, resource_id = NULL,
    check_at = statement_timestamp() + $9 * interval '1 millisecond'
WHERE scope = $1 AND operation = $2 AND key = $3 AND claim = $7 AND status = $8
