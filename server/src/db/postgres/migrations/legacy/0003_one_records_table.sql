-- idemkey schema, version 3: one records table for every front end (the
-- order route, in_transaction and the lease-mode layer).
--   scope: whose record it is (an account id, or a tenant the layer's scope
--          function names); the primary key is (scope, operation, key);
--   claim: the claim that last wrote the row; every take-over, completion
--          and release is conditional on it and on the row's status;
--   completed rows may have no body (a response over the layer's cap);
--   in-flight rows have no replay window yet.
ALTER TABLE idempotency_records DROP CONSTRAINT IF EXISTS idempotency_records_account_id_fkey;
ALTER TABLE idempotency_records DROP CONSTRAINT IF EXISTS idempotency_records_check;
ALTER TABLE idempotency_records RENAME COLUMN account_id TO scope;
ALTER TABLE idempotency_records ALTER COLUMN scope TYPE text USING scope::text;
ALTER TABLE idempotency_records ADD COLUMN claim uuid;
UPDATE idempotency_records SET claim = gen_random_uuid();
ALTER TABLE idempotency_records ALTER COLUMN claim SET NOT NULL;
ALTER TABLE idempotency_records ALTER COLUMN response_headers TYPE text USING response_headers::text;
ALTER TABLE idempotency_records ALTER COLUMN response_body TYPE bytea USING convert_to(response_body, 'UTF8');
ALTER TABLE idempotency_records ALTER COLUMN replay_until DROP NOT NULL;
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_completed
    CHECK ((status = 'completed') = (response_status IS NOT NULL));
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_window
    CHECK (status = 'in_flight' OR replay_until IS NOT NULL);

INSERT INTO idempotency_records
    (scope, operation, key, fingerprint, claim, status, response_status, response_headers,
     response_body, created_at, replay_until, lease_until)
SELECT scope, operation, key, fingerprint, claim, status, response_status, response_headers,
       response_body, created_at, replay_until, lease_until
FROM idempotency_leases
ON CONFLICT (scope, operation, key) DO NOTHING;
DROP TABLE idempotency_leases;

-- For the trim: claims abandoned past the retention are deleted too.
CREATE INDEX idempotency_records_lease ON idempotency_records (lease_until) WHERE status = 'in_flight';
