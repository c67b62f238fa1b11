-- idemkey schema, version 6: prices, stable purchase references and the
-- transactional outbox.
--   products: the catalogue an order's amount is computed from, inside the
--             order's transaction; seeded with the demo's products (the
--             core's CATALOGUE, which a test compares with these rows);
--   orders:   amount and currency (NULL for orders placed before prices),
--             and an optional purchase reference, unique per account for
--             ever, independently of how long keys are kept;
--   outbox:   effects outside the database (a charge at the payment
--             provider), written in the transaction of the order they
--             belong to and delivered later, at least once, by a worker.
CREATE TABLE products (
    sku              text PRIMARY KEY CHECK (sku ~ '^[A-Z0-9-]{1,32}$'),
    unit_price_cents bigint NOT NULL CHECK (unit_price_cents > 0),
    currency         text NOT NULL CHECK (currency ~ '^[A-Z]{3}$')
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

ALTER TABLE orders
    ADD COLUMN amount_cents bigint CHECK (amount_cents > 0),
    ADD COLUMN currency     text CHECK (currency ~ '^[A-Z]{3}$'),
    ADD COLUMN reference    text CHECK (reference ~ '^[A-Za-z0-9._-]{1,64}$');
-- Partial: an order without a reference (most of them) costs no entry.
CREATE UNIQUE INDEX orders_account_reference ON orders (account_id, reference)
    WHERE reference IS NOT NULL;

-- One row per effect to deliver; its primary key starts with the scope, as
-- every key of an account's table does (docs/operations.md). The key's tuple (scope, operation, key,
-- effect) is what the downstream key is derived from; the worker records
-- the derived key at its first attempt.
--   pending:   to deliver from available_at; a worker holding it has a
--              lease (lease_until, lease) that another may take over once
--              it is past, at the database's clock;
--   delivered: the downstream accepted it (result: its answer, JSON);
--   failed:    the downstream refused it for good (result: the reason);
--   dead:      the attempts ran out (last_error says why); an operator may
--              send it back to pending.
CREATE TABLE outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY,
    scope          text NOT NULL,
    operation      text NOT NULL,
    key            text NOT NULL,
    effect         text NOT NULL CHECK (effect ~ '^[a-z][a-z0-9-]{0,31}$'),
    resource_id    text,
    payload        text NOT NULL,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts       integer NOT NULL DEFAULT 0,
    available_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    lease_until    timestamptz,
    lease          uuid,
    downstream_key text,
    result         text,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    settled_at     timestamptz,
    PRIMARY KEY (scope, id),
    CHECK ((status = 'pending') = (settled_at IS NULL))
);
CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_resource ON outbox (scope, resource_id, effect);
CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead';
