-- Ends a claim, if this lease still holds it: delivered, failed or dead
-- for good, or pending again after $6 ms at the store's clock.
-- $1 id, $2 lease, $3 status, $4 result, $5 last error, $6 delay ms,
-- $7 the downstream key sent, $8 scope.
UPDATE outbox
SET status = $3::text,
    result = $4::text,
    last_error = COALESCE($5::text, last_error),
    downstream_key = $7::text,
    available_at = CASE WHEN $3::text = 'pending'
                        THEN statement_timestamp() + $6::int8 * interval '1 millisecond'
                        ELSE available_at END,
    settled_at = CASE WHEN $3::text = 'pending' THEN NULL ELSE statement_timestamp() END,
    lease = NULL,
    lease_until = NULL
WHERE scope = $8::text AND id = $1::int8 AND lease = $2::uuid AND status = 'pending'
