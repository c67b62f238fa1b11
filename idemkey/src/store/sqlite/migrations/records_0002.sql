-- SQLite evaluates `x IN (a, b, c)` over three or more constants by
-- filling a temporary table each time a statement runs, a CHECK included:
-- the status CHECK made every claim and every completion pay for that on
-- the store's one writer (about 2 us each). The same rule as comparisons.
-- SQLite cannot alter a CHECK, so the table is rebuilt (its rows copied
-- once, in the migration's transaction).
CREATE TABLE idempotency_records_next (
    scope            TEXT NOT NULL,
    operation        TEXT NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      BLOB NOT NULL CHECK (length(fingerprint) = 32),
    claim            BLOB NOT NULL CHECK (length(claim) = 16),
    status           TEXT NOT NULL
                     CHECK (status = 'in_flight' OR status = 'completed' OR status = 'tombstone'),
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
INSERT INTO idempotency_records_next
    (scope, operation, key, fingerprint, claim, status, response_status, response_headers,
     response_body, created_at, replay_until, lease_until, resource_id)
SELECT scope, operation, key, fingerprint, claim, status, response_status, response_headers,
       response_body, created_at, replay_until, lease_until, resource_id
FROM idempotency_records;
DROP TABLE idempotency_records;
ALTER TABLE idempotency_records_next RENAME TO idempotency_records;
CREATE INDEX idempotency_records_replay ON idempotency_records (replay_until) WHERE status = 'completed';
CREATE INDEX idempotency_records_created ON idempotency_records (created_at) WHERE status = 'tombstone';
CREATE INDEX idempotency_records_lease ON idempotency_records (lease_until) WHERE status = 'in_flight';
