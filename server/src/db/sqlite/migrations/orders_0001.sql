-- The order service's tables: accounts and their hashed API tokens, the
-- catalogue, and orders (each created in one transaction with its key's
-- record in the library's idempotency_records). Times are milliseconds
-- since the epoch unless named otherwise.
CREATE TABLE accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (unixepoch() * 1000),
    demo_slot  INTEGER CHECK (demo_slot IN (1, 2))
);
CREATE INDEX accounts_demo_slot ON accounts (demo_slot) WHERE demo_slot IS NOT NULL;

CREATE TABLE api_tokens (
    token_hash   BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    id           TEXT NOT NULL UNIQUE,
    account_id   TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL DEFAULT (unixepoch() * 1000),
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX api_tokens_account ON api_tokens (account_id);

CREATE TABLE orders (
    id           TEXT NOT NULL,
    account_id   TEXT NOT NULL REFERENCES accounts (id),
    sku          TEXT NOT NULL CHECK (length(sku) BETWEEN 1 AND 32),
    quantity     INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at   INTEGER NOT NULL,
    amount_cents INTEGER CHECK (amount_cents > 0),
    currency     TEXT CHECK (length(currency) = 3),
    reference    TEXT CHECK (length(reference) BETWEEN 1 AND 64),
    PRIMARY KEY (account_id, id)
);
CREATE INDEX orders_account ON orders (account_id, created_at);
CREATE UNIQUE INDEX orders_account_reference ON orders (account_id, reference)
    WHERE reference IS NOT NULL;

CREATE TABLE products (
    sku              TEXT PRIMARY KEY CHECK (length(sku) BETWEEN 1 AND 32),
    unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents > 0),
    currency         TEXT NOT NULL CHECK (length(currency) = 3)
);
INSERT INTO products (sku, unit_price_cents, currency) VALUES
    ('LIBRO-TS', 2990, 'EUR'),
    ('CAFE-1KG', 1850, 'EUR'),
    ('TAZA-01', 990, 'EUR'),
    ('TAZA-02', 1090, 'EUR'),
    ('LAMPARA-9', 4500, 'EUR'),
    ('CAMISETA-M', 1500, 'EUR'),
    ('DECLINE-TEST', 402, 'EUR'),
    ('A', 100, 'EUR'),
    ('A-1', 100, 'EUR');
