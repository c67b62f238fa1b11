-- Replaces a row with a new claim only while it still carries the claim
-- (?7) and the status (?8) the caller decided on.
-- ?1 scope, ?2 operation, ?3 key, ?4 fingerprint, ?5 new claim, ?6 lease ms.
UPDATE idempotency_records
SET fingerprint = ?4, claim = ?5, status = 'in_flight', created_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?6, replay_until = NULL, response_status = NULL,
    response_headers = NULL, response_body = NULL, resource_id = NULL
WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND claim = ?7 AND status = ?8
