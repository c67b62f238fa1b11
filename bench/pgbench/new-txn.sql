-- pgbench ceiling, multi-statement form: the minimal equivalent of one new order on idemkey's schema,
-- one statement per step as a straightforward implementation would send them (5 round trips):
-- BEGIN; claim the key (in_flight, resolving the account from the token hash); insert the order;
-- store the 201 and complete the record; COMMIT. Random key and order id per transaction.
-- Variables (-D): tok fp op body hdrs created_at replay_ms sku qty. Timeouts come from PGOPTIONS
-- (session level, as idemkey-server sets them in the startup packet).
\set k random(1, 9223372036854775806)
\set o1 random(0, 9223372036854775806)
\set o2 random(0, 9223372036854775806)
BEGIN;
INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status, created_at, lease_until)
SELECT account_id::text, :op::text, :k::text, :fp::bytea, gen_random_uuid(), 'in_flight',
       statement_timestamp(), statement_timestamp() + interval '30 seconds'
FROM api_tokens WHERE token_hash = :tok::bytea
ON CONFLICT (scope, operation, key) DO NOTHING
RETURNING scope AS account_id \gset
INSERT INTO orders (id, account_id, sku, quantity, created_at)
VALUES ((lpad(to_hex(:o1::int8), 16, '0') || lpad(to_hex(:o2::int8), 16, '0'))::uuid, :account_id::uuid,
        :sku::text, :qty::int4, :created_at::timestamptz);
UPDATE idempotency_records
SET status = 'completed', response_status = 201, response_headers = :hdrs::text, response_body = :body::bytea,
    lease_until = NULL, replay_until = statement_timestamp() + :replay_ms * interval '1 millisecond',
    resource_id = lpad(to_hex(:o1::int8), 16, '0') || lpad(to_hex(:o2::int8), 16, '0')
WHERE scope = :account_id::text AND operation = :op::text AND key = :k::text;
COMMIT;
