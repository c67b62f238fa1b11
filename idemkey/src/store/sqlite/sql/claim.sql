-- Claims a key: inserts an in-flight row whose lease ends ?6 ms after the
-- store's clock, or does nothing when the key is taken (the caller holds
-- BEGIN IMMEDIATE, so no other writer runs meanwhile).
-- ?1 scope, ?2 operation, ?3 key, ?4 fingerprint, ?5 claim, ?6 lease ms.
INSERT INTO idempotency_records
    (scope, operation, key, fingerprint, claim, status, created_at, lease_until)
VALUES (?1, ?2, ?3, ?4, ?5, 'in_flight', CAST(round(unixepoch('subsec') * 1000) AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?6)
ON CONFLICT (scope, operation, key) DO NOTHING
