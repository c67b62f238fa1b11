-- The order route's fast path, one round trip per new order and per
-- replay: authenticate, look the key up, claim it, insert its charge in
-- the outbox and the order with its amount and its charge's id, and store
-- its response, in one autocommit statement, at the store's clock. Each
-- insert runs only on a row of the one before it (claim -> charge ->
-- new_order): nothing is written for a key that was not claimed.
-- $1 token_hash, $2 operation, $3 key, $4 fingerprint, $5 claim,
-- $6 response_body, $7 response_headers, $8 replay ms, $9 order id,
-- $10 sku, $11 quantity, $12 order created_at (shown in the body),
-- $13 response status, $14 unit price in cents and $15 currency (as the
-- response says: checked against the catalogue here), $16 reference (or
-- NULL), $17 amount in cents, $18 the charge's outbox payload.
--
-- A key committed before this statement began is answered from `existing`
-- (with the store's clock, for the engine to decide on) without attempting
-- the INSERT. A key claimed by a concurrent transaction is invisible to
-- this snapshot, so the INSERT ... ON CONFLICT DO NOTHING waits for that
-- claimant; if it commits, nothing is inserted and, READ COMMITTED giving
-- one snapshot per statement, no row comes back either: the caller then
-- reads the winner's row with lookup.sql, a new statement.
-- A new key whose price is not the catalogue's (`catalogue`) or whose
-- reference another order holds (`reference`, with that order's id) stores
-- nothing. A reference taken by a concurrent transaction fails the
-- statement on orders_account_reference; the caller runs it again.
--
-- The caller's account reaches the key lookups as a scalar subquery (an
-- InitPlan parameter), never as a join column: joined, a generic plan built
-- while a table was analyzed empty may put the table on the outer side and
-- scan its whole index without the leading column, for every order, until
-- the next analyze (the statement is prepared once per connection).
WITH caller AS (
    SELECT account_id, account_id::text AS scope FROM api_tokens
    WHERE token_hash = $1::bytea AND revoked_at IS NULL
), existing AS (
    SELECT r.fingerprint, r.claim, r.status, r.lease_until, r.replay_until, r.created_at,
           r.response_status, r.response_headers, r.response_body, r.resource_id
    FROM idempotency_records r
    WHERE r.scope = (SELECT scope FROM caller) AND r.operation = $2::text AND r.key = $3::text
), product AS (
    SELECT 1 FROM products
    WHERE sku = $10::text AND unit_price_cents = $14::int8 AND currency = $15::text
), taken AS (
    SELECT o.id FROM orders o
    WHERE o.account_id = (SELECT account_id FROM caller) AND o.reference = $16::text
), claim AS (
    INSERT INTO idempotency_records
        (scope, operation, key, fingerprint, claim, status, response_status,
         response_headers, response_body, created_at, replay_until, resource_id, check_at)
    SELECT scope, $2::text, $3::text, $4::bytea, $5::uuid, 'completed', $13::int4,
           $7::text, $6::bytea, statement_timestamp(),
           statement_timestamp() + $8::int8 * interval '1 millisecond', $9::uuid::text,
           statement_timestamp() + $8::int8 * interval '1 millisecond'
    FROM caller
    WHERE NOT EXISTS (SELECT 1 FROM existing) AND EXISTS (SELECT 1 FROM product)
      AND NOT EXISTS (SELECT 1 FROM taken)
    ON CONFLICT (scope, operation, key) DO NOTHING
    RETURNING scope
), charge AS (
    INSERT INTO outbox (scope, operation, key, effect, resource_id, payload)
    SELECT claim.scope, $2::text, $3::text, 'charge', $9::uuid::text, $18::text
    FROM claim
    RETURNING id
), new_order AS (
    INSERT INTO orders (id, account_id, sku, quantity, created_at, amount_cents, currency,
                        reference, charge_message)
    SELECT $9::uuid, c.account_id, $10::text, $11::int4, $12::timestamptz, $17::int8,
           $15::text, $16::text, charge.id
    FROM charge, caller c
    RETURNING id
)
SELECT 'created'::text AS outcome, NULL::uuid AS account_id,
       statement_timestamp() AS now, NULL::bytea AS fingerprint, NULL::uuid AS claim,
       NULL::text AS status, NULL::timestamptz AS lease_until,
       NULL::timestamptz AS replay_until, NULL::timestamptz AS created_at,
       NULL::int4 AS response_status, NULL::text AS response_headers,
       NULL::bytea AS response_body, NULL::text AS resource_id
FROM new_order
UNION ALL
SELECT 'unauthorized', NULL, statement_timestamp(), NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM caller)
UNION ALL
SELECT 'existing', c.account_id, statement_timestamp(), e.fingerprint, e.claim, e.status,
       e.lease_until, e.replay_until, e.created_at, e.response_status, e.response_headers,
       e.response_body, e.resource_id
FROM existing e, caller c
UNION ALL
SELECT 'catalogue', c.account_id, statement_timestamp(), NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
FROM caller c
WHERE NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM product)
UNION ALL
SELECT 'reference', c.account_id, statement_timestamp(), NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, t.id::text
FROM taken t, caller c
WHERE NOT EXISTS (SELECT 1 FROM existing) AND EXISTS (SELECT 1 FROM product)
