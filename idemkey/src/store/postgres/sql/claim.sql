-- Claims a key: inserts an in-flight row whose lease ends $6 ms after the
-- store's clock, or does nothing when the key is taken (an insert that meets
-- a concurrent claimant's uncommitted row waits for it). The caller then
-- reads the row with read.sql: a new statement, whose snapshot sees it.
-- $1 scope, $2 operation, $3 key, $4 fingerprint, $5 claim, $6 lease ms.
INSERT INTO idempotency_records
    (scope, operation, key, fingerprint, claim, status, created_at, lease_until)
VALUES ($1, $2, $3, $4, $5, 'in_flight', statement_timestamp(),
        statement_timestamp() + $6 * interval '1 millisecond')
ON CONFLICT (scope, operation, key) DO NOTHING
RETURNING 1
