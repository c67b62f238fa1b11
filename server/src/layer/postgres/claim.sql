-- Claims a key: commits an in-flight row, or does nothing if the key is
-- taken. Under READ COMMITTED an insert that meets a concurrent claimant's
-- uncommitted row waits for it; the caller then reads the row with a
-- separate statement, whose new snapshot sees it.
INSERT INTO idempotency_leases (scope, operation, key, fingerprint, claim, status, created_at, lease_until)
VALUES ($1, $2, $3, $4, $5, 'in_flight', $6, $7)
ON CONFLICT (scope, operation, key) DO NOTHING
