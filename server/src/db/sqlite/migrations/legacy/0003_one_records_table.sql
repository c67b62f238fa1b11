-- idemkey SQLite schema, version 3 (as the PostgreSQL one): one records
-- table for every front end, keyed by (scope, operation, key), each row
-- carrying the claim that last wrote it. SQLite cannot alter a primary
-- key, so the table is rebuilt. Times are milliseconds since the epoch;
-- `claim` is a 16-byte UUID.
CREATE TABLE idempotency_records_v3 (
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
INSERT INTO idempotency_records_v3
SELECT account_id, operation, key, fingerprint, randomblob(16), status, response_status,
       response_headers, CAST(response_body AS BLOB), created_at, replay_until, lease_until,
       resource_id
FROM idempotency_records;
INSERT OR IGNORE INTO idempotency_records_v3
SELECT scope, operation, key, fingerprint, claim, status, response_status, response_headers,
       response_body, created_at, replay_until, lease_until, NULL
FROM idempotency_leases;
DROP TABLE idempotency_records;
DROP TABLE idempotency_leases;
ALTER TABLE idempotency_records_v3 RENAME TO idempotency_records;
CREATE INDEX idempotency_records_replay ON idempotency_records (replay_until) WHERE status = 'completed';
CREATE INDEX idempotency_records_created ON idempotency_records (created_at) WHERE status = 'tombstone';
CREATE INDEX idempotency_records_lease ON idempotency_records (lease_until) WHERE status = 'in_flight';
