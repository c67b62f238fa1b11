-- idemkey schema, version 1, SQLite dialect: the same tables and the same
-- primary key as the PostgreSQL schema. Times are milliseconds since the
-- Unix epoch (INTEGER), ids are text UUIDs.

CREATE TABLE accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (unixepoch() * 1000)
);

-- Only the SHA-256 of a token is stored; the token itself is shown once.
CREATE TABLE api_tokens (
    token_hash BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL DEFAULT (unixepoch() * 1000)
);
CREATE INDEX api_tokens_account ON api_tokens (account_id);

CREATE TABLE orders (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    sku        TEXT NOT NULL CHECK (length(sku) BETWEEN 1 AND 32),
    quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at INTEGER NOT NULL
);
CREATE INDEX orders_account ON orders (account_id, created_at);

-- One row per (account, operation, key); the primary key is the guarantee.
-- Status values as in PostgreSQL: in_flight, completed, tombstone.
CREATE TABLE idempotency_records (
    account_id       TEXT NOT NULL REFERENCES accounts (id),
    operation        TEXT NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      BLOB NOT NULL CHECK (length(fingerprint) = 32),
    status           TEXT NOT NULL CHECK (status IN ('in_flight', 'completed', 'tombstone')),
    response_status  INTEGER CHECK (response_status BETWEEN 100 AND 599),
    response_headers TEXT,
    response_body    TEXT,
    created_at       INTEGER NOT NULL,
    replay_until     INTEGER NOT NULL,
    lease_until      INTEGER,
    resource_id      TEXT,
    PRIMARY KEY (account_id, operation, key),
    CHECK ((status = 'completed') = (response_status IS NOT NULL AND response_body IS NOT NULL)),
    CHECK ((status = 'in_flight') = (lease_until IS NOT NULL))
);
CREATE INDEX idempotency_records_replay ON idempotency_records (replay_until) WHERE status = 'completed';
CREATE INDEX idempotency_records_created ON idempotency_records (created_at) WHERE status = 'tombstone';
