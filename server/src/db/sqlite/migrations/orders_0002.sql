-- Purchases (an operation of several steps: reserve stock, charge, confirm):
-- each product's stock, and the reservation a purchase makes in its first
-- transaction and releases when a later step fails for good.
ALTER TABLE products ADD COLUMN stock INTEGER NOT NULL DEFAULT 1000000 CHECK (stock >= 0);
CREATE TABLE reservations (
    id           TEXT NOT NULL,
    account_id   TEXT NOT NULL REFERENCES accounts (id),
    sku          TEXT NOT NULL REFERENCES products (sku),
    quantity     INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    currency     TEXT NOT NULL CHECK (length(currency) = 3),
    state        TEXT NOT NULL CHECK (state IN ('reserved', 'released')),
    created_at   INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    released_at  INTEGER,
    PRIMARY KEY (account_id, id),
    CHECK ((state = 'released') = (released_at IS NOT NULL))
) WITHOUT ROWID;
CREATE INDEX reservations_account ON reservations (account_id, created_at);
