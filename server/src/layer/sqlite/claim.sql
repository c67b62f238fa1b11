-- Claims a key: inserts an in-flight row, or does nothing if the key is
-- taken (the caller holds BEGIN IMMEDIATE, so no other writer runs meanwhile).
INSERT INTO idempotency_leases (scope, operation, key, fingerprint, claim, status, created_at, lease_until)
VALUES (?1, ?2, ?3, ?4, ?5, 'in_flight', ?6, ?7)
ON CONFLICT (scope, operation, key) DO NOTHING
