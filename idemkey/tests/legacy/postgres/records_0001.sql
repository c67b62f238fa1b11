-- One row per (scope, operation, key): the key's claim, then its stored
-- response, then (past the replay window) its tombstone.
CREATE TABLE idempotency_records (
    scope            text NOT NULL,
    operation        text NOT NULL,
    key              text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      bytea NOT NULL CHECK (length(fingerprint) = 32),
    status           text NOT NULL CHECK (status IN ('in_flight', 'completed', 'tombstone')),
    response_status  integer CHECK (response_status BETWEEN 100 AND 599),
    response_headers text,
    response_body    bytea,
    created_at       timestamptz NOT NULL,
    replay_until     timestamptz,
    lease_until      timestamptz,
    resource_id      text,
    claim            uuid NOT NULL,
    PRIMARY KEY (scope, operation, key),
    CONSTRAINT idempotency_records_check1 CHECK ((status = 'in_flight') = (lease_until IS NOT NULL)),
    CONSTRAINT idempotency_records_completed CHECK ((status = 'completed') = (response_status IS NOT NULL)),
    CONSTRAINT idempotency_records_window CHECK (status = 'in_flight' OR replay_until IS NOT NULL)
);
CREATE INDEX idempotency_records_replay ON idempotency_records (replay_until) WHERE status = 'completed';
CREATE INDEX idempotency_records_created ON idempotency_records (created_at) WHERE status = 'tombstone';
CREATE INDEX idempotency_records_lease ON idempotency_records (lease_until) WHERE status = 'in_flight';
