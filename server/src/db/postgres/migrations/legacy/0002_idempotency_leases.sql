-- idemkey schema, version 2: the records of the lease-mode layer
-- (idemkey_server::layer), for handlers whose effects are not in this
-- database. One row per (scope, operation, key); the primary key is the
-- guarantee. `claim` identifies the claim that last wrote the row: every
-- take-over, completion and release is conditional on it.
--   in_flight: a handler runs until lease_until (then may be taken over);
--   completed: the response is stored and replayed until replay_until;
--              response_body is NULL when the body was over the layer's cap.
CREATE TABLE idempotency_leases (
    scope            text NOT NULL,
    operation        text NOT NULL,
    key              text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      bytea NOT NULL CHECK (length(fingerprint) = 32),
    claim            uuid NOT NULL,
    status           text NOT NULL CHECK (status IN ('in_flight', 'completed')),
    created_at       timestamptz NOT NULL,
    lease_until      timestamptz,
    replay_until     timestamptz,
    response_status  integer CHECK (response_status BETWEEN 100 AND 599),
    response_headers text,
    response_body    bytea,
    PRIMARY KEY (scope, operation, key),
    CHECK ((status = 'in_flight') = (lease_until IS NOT NULL)),
    CHECK ((status = 'completed') = (replay_until IS NOT NULL AND response_status IS NOT NULL))
);
CREATE INDEX idempotency_leases_replay ON idempotency_leases (replay_until) WHERE status = 'completed';
