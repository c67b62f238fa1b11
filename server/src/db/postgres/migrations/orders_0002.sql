-- Purchases (an operation of several steps: reserve stock, charge, confirm):
-- each product's stock, and the reservation a purchase makes in its first
-- transaction and releases when a later step fails for good.
ALTER TABLE products ADD COLUMN stock integer NOT NULL DEFAULT 1000000 CHECK (stock >= 0);
CREATE TABLE reservations (
    id           uuid NOT NULL,
    account_id   uuid NOT NULL REFERENCES accounts (id),
    sku          text NOT NULL REFERENCES products (sku),
    quantity     integer NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    state        text NOT NULL CHECK (state IN ('reserved', 'released')),
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    released_at  timestamptz,
    PRIMARY KEY (account_id, id),
    CHECK ((state = 'released') = (released_at IS NOT NULL))
);
CREATE INDEX reservations_account ON reservations (account_id, created_at);
