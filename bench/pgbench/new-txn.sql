-- pgbench ceiling, multi-statement form: the minimal equivalent of one new order on idemkey's schema,
-- one statement per step as a straightforward implementation would send them (5 round trips):
-- BEGIN; claim the key (in_flight, resolving the account from the token hash); insert the order;
-- store the 201 and complete the record; COMMIT. Random key and order id per transaction.
-- Variables (-D): tok fp op body hdrs created_at replay_until sku qty. Timeouts come from PGOPTIONS
-- (session level, as idemkey-server sets them in the startup packet).
\set k random(1, 9223372036854775806)
\set o1 random(0, 9223372036854775806)
\set o2 random(0, 9223372036854775806)
BEGIN;
INSERT INTO idempotency_records (account_id, operation, key, fingerprint, status, created_at, replay_until, lease_until)
SELECT account_id, :op::text, :k::text, :fp::bytea, 'in_flight', :created_at::timestamptz,
       :replay_until::timestamptz, :created_at::timestamptz + interval '30 seconds'
FROM api_tokens WHERE token_hash = :tok::bytea
ON CONFLICT (account_id, operation, key) DO NOTHING
RETURNING account_id \gset
INSERT INTO orders (id, account_id, sku, quantity, created_at)
VALUES ((lpad(to_hex(:o1::int8), 16, '0') || lpad(to_hex(:o2::int8), 16, '0'))::uuid, :account_id::uuid,
        :sku::text, :qty::int4, :created_at::timestamptz);
UPDATE idempotency_records
SET status = 'completed', response_status = 201, response_headers = :hdrs::text::jsonb, response_body = :body::text,
    lease_until = NULL, resource_id = lpad(to_hex(:o1::int8), 16, '0') || lpad(to_hex(:o2::int8), 16, '0')
WHERE account_id = :account_id::uuid AND operation = :op::text AND key = :k::text;
COMMIT;
