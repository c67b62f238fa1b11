-- Policy `reexecute`: replace the expired record of this key and insert the
-- new order, in one statement, only if the record is still the expired one
-- with the same fingerprint (a concurrent re-execution wins or loses as a
-- whole: UPDATE re-checks the WHERE clause on the row it waited for).
-- $1 token_hash, $2 operation, $3 key, $4 fingerprint, $5 response_body,
-- $6 response_headers, $7 created_at, $8 replay_until, $9 order id,
-- $10 sku, $11 quantity, $12 now.
WITH caller AS (
    SELECT account_id FROM api_tokens WHERE token_hash = $1::bytea
), replaced AS (
    UPDATE idempotency_records r
    SET status = 'completed', response_status = 201, response_headers = $6::text::jsonb,
        response_body = $5::text, created_at = $7::timestamptz,
        replay_until = $8::timestamptz, lease_until = NULL, resource_id = $9::uuid::text
    FROM caller c
    WHERE r.account_id = c.account_id AND r.operation = $2::text AND r.key = $3::text
      AND r.fingerprint = $4::bytea
      AND (r.status = 'tombstone'
           OR (r.status = 'completed' AND r.replay_until <= $12::timestamptz)
           OR (r.status = 'in_flight' AND r.lease_until <= $12::timestamptz))
    RETURNING r.account_id
), new_order AS (
    INSERT INTO orders (id, account_id, sku, quantity, created_at)
    SELECT $9::uuid, account_id, $10::text, $11::int4, $7::timestamptz FROM replaced
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM caller) AS known, (SELECT count(*) FROM new_order) AS inserted
