-- idemkey schema, version 1: accounts, API tokens, orders and the
-- idempotency records that guard them.

CREATE TABLE accounts (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a token is stored; the token itself is shown once.
CREATE TABLE api_tokens (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    account_id uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_tokens_account ON api_tokens (account_id);

CREATE TABLE orders (
    id         uuid PRIMARY KEY,
    account_id uuid NOT NULL REFERENCES accounts (id),
    sku        text NOT NULL CHECK (sku ~ '^[A-Z0-9-]{1,32}$'),
    quantity   integer NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at timestamptz NOT NULL
);
CREATE INDEX orders_account ON orders (account_id, created_at);

-- One row per (account, operation, key). The primary key is the guarantee:
-- no SELECT in application code replaces it.
--   completed: the response is stored and replayed until replay_until;
--   tombstone: the response was trimmed, fingerprint and resource kept so
--              reuse (422), expiry (410) and lookups still answer;
--   in_flight: a lease-mode claim whose handler runs until lease_until.
CREATE TABLE idempotency_records (
    account_id       uuid NOT NULL REFERENCES accounts (id),
    operation        text NOT NULL,
    key              text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      bytea NOT NULL CHECK (length(fingerprint) = 32),
    status           text NOT NULL CHECK (status IN ('in_flight', 'completed', 'tombstone')),
    response_status  integer CHECK (response_status BETWEEN 100 AND 599),
    response_headers jsonb,
    response_body    text,
    created_at       timestamptz NOT NULL,
    replay_until     timestamptz NOT NULL,
    lease_until      timestamptz,
    resource_id      text,
    PRIMARY KEY (account_id, operation, key),
    CHECK ((status = 'completed') = (response_status IS NOT NULL AND response_body IS NOT NULL)),
    CHECK ((status = 'in_flight') = (lease_until IS NOT NULL))
);
-- For the trim task: completed records whose replay window is over, and
-- tombstones past their retention.
CREATE INDEX idempotency_records_replay ON idempotency_records (replay_until) WHERE status = 'completed';
CREATE INDEX idempotency_records_created ON idempotency_records (created_at) WHERE status = 'tombstone';
