-- idemkey SQLite schema, version 8 (as the PostgreSQL one): the payment
-- provider simulator's request log, every charge request, lookup and run
-- of the charge handler in arrival order (seq), so tests can count them.
CREATE TABLE provider_requests (
    scope           TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    seq             INTEGER PRIMARY KEY,
    kind            TEXT NOT NULL CHECK (kind IN ('request', 'lookup', 'charge')),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 1024),
    order_id        TEXT,
    created_at      INTEGER NOT NULL
);
CREATE INDEX provider_requests_scope ON provider_requests (scope, seq);
