-- Claims a key: inserts an in-flight row whose lease ends $6 ms after the
-- store's clock, or does nothing when the key is taken (an insert that meets
-- a concurrent claimant's uncommitted row waits for it). The caller then
-- reads the row with read.sql: a new statement, whose snapshot sees it.
-- Maintenance first looks at the row when a response stored at once would
-- leave its replay window ($7 ms): the completion leaves `check_at` alone,
-- and a row completed later is looked at again at its own window's end.
-- $1 scope, $2 operation, $3 key, $4 fingerprint, $5 claim, $6 lease ms,
-- $7 replay ms.
INSERT INTO idempotency_records
    (scope, operation, key, fingerprint, claim, status, created_at, lease_until, check_at)
VALUES ($1, $2, $3, $4, $5, 'in_flight', statement_timestamp(),
        statement_timestamp() + $6 * interval '1 millisecond',
        statement_timestamp() + $7 * interval '1 millisecond')
ON CONFLICT (scope, operation, key) DO NOTHING
RETURNING 1
