-- Replaces a row with a new claim only if it still carries the claim the
-- caller decided on (?8). SQLite runs one writer at a time (BEGIN IMMEDIATE), so a second taker
-- finds the new claim and updates nothing.
UPDATE idempotency_leases
SET fingerprint = ?4, claim = ?5, status = 'in_flight', created_at = ?6, lease_until = ?7,
    replay_until = NULL, response_status = NULL, response_headers = NULL, response_body = NULL
WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND claim = ?8
