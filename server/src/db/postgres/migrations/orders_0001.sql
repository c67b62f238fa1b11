-- The order service's tables: accounts and their hashed API tokens, the
-- catalogue, and orders (each created in one transaction with its key's
-- record in the library's idempotency_records).
CREATE TABLE accounts (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    demo_slot  smallint CHECK (demo_slot IN (1, 2))
);
CREATE INDEX accounts_demo_slot ON accounts (demo_slot) WHERE demo_slot IS NOT NULL;

CREATE TABLE api_tokens (
    token_hash   bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    id           uuid NOT NULL DEFAULT gen_random_uuid() CONSTRAINT api_tokens_id_key UNIQUE,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_account ON api_tokens (account_id);

CREATE TABLE orders (
    id           uuid NOT NULL,
    account_id   uuid NOT NULL REFERENCES accounts (id),
    sku          text NOT NULL CHECK (sku ~ '^[A-Z0-9-]{1,32}$'),
    quantity     integer NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at   timestamptz NOT NULL,
    amount_cents bigint CHECK (amount_cents > 0),
    currency     text CHECK (currency ~ '^[A-Z]{3}$'),
    reference    text CHECK (reference ~ '^[A-Za-z0-9._-]{1,64}$'),
    PRIMARY KEY (account_id, id)
);
CREATE INDEX orders_account ON orders (account_id, created_at);
CREATE UNIQUE INDEX orders_account_reference ON orders (account_id, reference)
    WHERE reference IS NOT NULL;

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
