-- idemkey SQLite schema, version 2 (numbered as the PostgreSQL migration of
-- the same table): the records of the lease-mode layer. Times are integer
-- milliseconds since the Unix epoch; `claim` is a 16-byte UUID.
CREATE TABLE idempotency_leases (
    scope            TEXT NOT NULL,
    operation        TEXT NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      BLOB NOT NULL CHECK (length(fingerprint) = 32),
    claim            BLOB NOT NULL CHECK (length(claim) = 16),
    status           TEXT NOT NULL CHECK (status IN ('in_flight', 'completed')),
    created_at       INTEGER NOT NULL,
    lease_until      INTEGER,
    replay_until     INTEGER,
    response_status  INTEGER CHECK (response_status BETWEEN 100 AND 599),
    response_headers TEXT,
    response_body    BLOB,
    PRIMARY KEY (scope, operation, key),
    CHECK ((status = 'in_flight') = (lease_until IS NOT NULL)),
    CHECK ((status = 'completed') = (replay_until IS NOT NULL AND response_status IS NOT NULL))
) WITHOUT ROWID;
CREATE INDEX idempotency_leases_replay ON idempotency_leases (replay_until) WHERE status = 'completed';
