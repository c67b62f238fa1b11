-- idemkey SQLite schema, version 5 (as the PostgreSQL one): the orders'
-- primary key includes the account. SQLite cannot alter a primary key, so
-- the table is rebuilt.
CREATE TABLE orders_v5 (
    id         TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    sku        TEXT NOT NULL CHECK (length(sku) BETWEEN 1 AND 32),
    quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, id)
);
INSERT INTO orders_v5 (id, account_id, sku, quantity, created_at)
    SELECT id, account_id, sku, quantity, created_at FROM orders;
DROP TABLE orders;
ALTER TABLE orders_v5 RENAME TO orders;
CREATE INDEX orders_account ON orders (account_id, created_at);
