-- CANDIDATE (benchmark evidence only, not used by the server): server/src/store/postgres/create_order.sql
-- with a "look before you claim" CTE. Still one round trip for a new order and for a replay, same
-- parameters, same output rows. A key already committed before the statement's snapshot is answered
-- from `existing` without attempting the INSERT (no speculative insertion, no jsonb parse of $6, no
-- ON CONFLICT arbiter check); a key claimed concurrently (invisible to the snapshot) still goes through
-- INSERT ... ON CONFLICT DO NOTHING, waits for the claimant and returns no row, so the caller's
-- fallback read (record.sql, a new statement) is unchanged.
-- $1 token_hash, $2 operation, $3 key, $4 fingerprint, $5 response_body, $6 response_headers,
-- $7 created_at, $8 replay_until, $9 order id, $10 sku, $11 quantity.
WITH caller AS (
    SELECT account_id FROM api_tokens WHERE token_hash = $1::bytea
), existing AS (
    SELECT r.fingerprint, r.status, r.response_status, r.response_headers, r.response_body,
           r.created_at, r.replay_until, r.lease_until, r.resource_id
    FROM caller c
    JOIN idempotency_records r
      ON r.account_id = c.account_id AND r.operation = $2::text AND r.key = $3::text
), claim AS (
    INSERT INTO idempotency_records
        (account_id, operation, key, fingerprint, status, response_status,
         response_headers, response_body, created_at, replay_until, resource_id)
    SELECT account_id, $2::text, $3::text, $4::bytea, 'completed', 201,
           $6::text::jsonb, $5::text, $7::timestamptz, $8::timestamptz, $9::uuid::text
    FROM caller
    WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (account_id, operation, key) DO NOTHING
    RETURNING account_id
), new_order AS (
    INSERT INTO orders (id, account_id, sku, quantity, created_at)
    SELECT $9::uuid, account_id, $10::text, $11::int4, $7::timestamptz FROM claim
    RETURNING id
)
SELECT 'created'::text AS outcome, NULL::bytea AS fingerprint, NULL::text AS status,
       NULL::int4 AS response_status, NULL::text AS response_headers,
       NULL::text AS response_body, NULL::timestamptz AS created_at,
       NULL::timestamptz AS replay_until, NULL::timestamptz AS lease_until,
       NULL::text AS resource_id
FROM new_order
UNION ALL
SELECT 'unauthorized', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM caller)
UNION ALL
SELECT 'existing', e.fingerprint, e.status, e.response_status, e.response_headers::text,
       e.response_body, e.created_at, e.replay_until, e.lease_until, e.resource_id
FROM existing e
