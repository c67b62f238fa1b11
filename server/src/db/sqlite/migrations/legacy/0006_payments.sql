-- idemkey SQLite schema, version 6 (as the PostgreSQL one): prices, stable
-- purchase references and the transactional outbox. Times in ms.
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

ALTER TABLE orders ADD COLUMN amount_cents INTEGER CHECK (amount_cents > 0);
ALTER TABLE orders ADD COLUMN currency TEXT CHECK (length(currency) = 3);
ALTER TABLE orders ADD COLUMN reference TEXT CHECK (length(reference) BETWEEN 1 AND 64);
-- Partial: an order without a reference (most of them) costs no entry.
CREATE UNIQUE INDEX orders_account_reference ON orders (account_id, reference)
    WHERE reference IS NOT NULL;

CREATE TABLE outbox (
    id             INTEGER PRIMARY KEY,
    scope          TEXT NOT NULL,
    operation      TEXT NOT NULL,
    key            TEXT NOT NULL,
    effect         TEXT NOT NULL CHECK (length(effect) BETWEEN 1 AND 32),
    resource_id    TEXT,
    payload        TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    available_at   INTEGER NOT NULL,
    lease_until    INTEGER,
    lease          TEXT,
    downstream_key TEXT,
    result         TEXT,
    last_error     TEXT,
    created_at     INTEGER NOT NULL,
    settled_at     INTEGER,
    CHECK ((status = 'pending') = (settled_at IS NULL))
);
CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_resource ON outbox (scope, resource_id, effect);
CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead';
