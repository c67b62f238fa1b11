-- One round trip per new order and per replay: authenticate, look the key
-- up, claim it, insert the order and store its response in one autocommit
-- statement.
-- $1 token_hash, $2 operation, $3 key, $4 fingerprint, $5 response_body,
-- $6 response_headers, $7 created_at, $8 replay_until, $9 order id,
-- $10 sku, $11 quantity.
--
-- A key committed before this statement began is answered from `existing`
-- without attempting the INSERT (no speculative insertion, no jsonb parse, no
-- conflict arbiter check: 1.5x replay throughput at the database, see
-- docs/performance.md). A key claimed by a concurrent transaction is
-- invisible to this snapshot, so the INSERT ... ON CONFLICT DO NOTHING waits
-- for that claimant; if it commits, nothing is inserted and, READ COMMITTED
-- giving one snapshot per statement, no row comes back either: the caller
-- then reads the winner's row with record.sql, a new statement.
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
