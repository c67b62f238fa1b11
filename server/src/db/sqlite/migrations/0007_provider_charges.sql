-- idemkey SQLite schema, version 7 (as the PostgreSQL one): the charges of
-- the payment provider simulator, one per (scope, idempotency key).
CREATE TABLE provider_charges (
    seq             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    scope           TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    order_id        TEXT NOT NULL,
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    currency        TEXT NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
    created_at      INTEGER NOT NULL,
    UNIQUE (scope, idempotency_key)
);
