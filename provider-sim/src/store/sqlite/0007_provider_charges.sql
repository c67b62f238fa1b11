-- idemkey SQLite schema, version 7 (as the PostgreSQL one): the charges of
-- the payment provider simulator, one per (scope, idempotency key).
CREATE TABLE provider_charges (
    scope           TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    currency        TEXT NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (scope, idempotency_key),
    UNIQUE (scope, id)
);
-- `GET /charges`: a scope's charges in the order they were made (an index
-- on scope is ordered by rowid within it; rowid grows with each insert and
-- charges are never deleted).
CREATE INDEX provider_charges_scope ON provider_charges (scope);
