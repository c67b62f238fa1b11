-- provider-sim version 3 (SQLite, as the PostgreSQL one): confirmations
-- and refunds, deduplicated by key as charges are, and a request log that
-- tells the effects apart.
CREATE TABLE provider_confirmations (
    scope           TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    recipient       TEXT NOT NULL CHECK (length(recipient) BETWEEN 1 AND 254),
    message         TEXT NOT NULL CHECK (length(message) BETWEEN 1 AND 2000),
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (scope, idempotency_key),
    UNIQUE (scope, id)
);
-- In rowid order within a scope, as provider_charges_scope.
CREATE INDEX provider_confirmations_scope ON provider_confirmations (scope);

CREATE TABLE provider_refunds (
    scope           TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT NOT NULL,
    charge_id       TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    currency        TEXT NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (scope, idempotency_key),
    UNIQUE (scope, id),
    UNIQUE (scope, charge_id),
    FOREIGN KEY (scope, charge_id) REFERENCES provider_charges (scope, id)
);
CREATE INDEX provider_refunds_scope ON provider_refunds (scope);

-- The request log gains each row's effect and the runs of the new
-- handlers. SQLite cannot change a CHECK in place: the table is rebuilt
-- (same rows, same seq), inside the migration's transaction.
CREATE TABLE provider_requests_v3 (
    scope           TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    seq             INTEGER PRIMARY KEY,
    kind            TEXT NOT NULL
        CHECK (kind IN ('request', 'lookup', 'charge', 'confirmation', 'refund')),
    effect          TEXT NOT NULL DEFAULT 'charges'
        CHECK (effect IN ('charges', 'confirmations', 'refunds')),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 1024),
    order_id        TEXT,
    created_at      INTEGER NOT NULL,
    CHECK (kind IN ('request', 'lookup') OR kind || 's' = effect)
);
INSERT INTO provider_requests_v3 (scope, seq, kind, effect, idempotency_key, order_id, created_at)
SELECT scope, seq, kind, 'charges', idempotency_key, order_id, created_at
FROM provider_requests;
DROP TABLE provider_requests;
ALTER TABLE provider_requests_v3 RENAME TO provider_requests;
CREATE INDEX provider_requests_scope ON provider_requests (scope, seq);
