-- One row per (scope, operation, key): the key's claim, then its stored
-- response, then (past the replay window) its tombstone. Times are
-- milliseconds since the epoch at SQLite's clock.
CREATE TABLE idempotency_records (
    scope            TEXT NOT NULL,
    operation        TEXT NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      BLOB NOT NULL CHECK (length(fingerprint) = 32),
    claim            BLOB NOT NULL CHECK (length(claim) = 16),
    status           TEXT NOT NULL CHECK (status IN ('in_flight', 'completed', 'tombstone')),
    response_status  INTEGER CHECK (response_status BETWEEN 100 AND 599),
    response_headers TEXT,
    response_body    BLOB,
    created_at       INTEGER NOT NULL,
    replay_until     INTEGER,
    lease_until      INTEGER,
    resource_id      TEXT,
    PRIMARY KEY (scope, operation, key),
    CHECK ((status = 'completed') = (response_status IS NOT NULL)),
    CHECK ((status = 'in_flight') = (lease_until IS NOT NULL)),
    CHECK (status = 'in_flight' OR replay_until IS NOT NULL)
);
CREATE INDEX idempotency_records_replay ON idempotency_records (replay_until) WHERE status = 'completed';
CREATE INDEX idempotency_records_created ON idempotency_records (created_at) WHERE status = 'tombstone';
CREATE INDEX idempotency_records_lease ON idempotency_records (lease_until) WHERE status = 'in_flight';
