-- idemkey PostgreSQL schema, version 8: the payment provider simulator's
-- request log. provider_charges keeps one charge per (scope, key), which
-- makes a client's second charge request under a key invisible; this log
-- keeps every charge request and lookup a caller sent (`request`,
-- `lookup`, written before any fault is drawn) and every run of the charge
-- handler (`charge`: the request reached the charge's write), in arrival
-- order, so tests can count them per key and order.
CREATE TABLE provider_requests (
    scope           text NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    kind            text NOT NULL CHECK (kind IN ('request', 'lookup', 'charge')),
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 1024),
    order_id        uuid,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (scope, seq)
);
