-- idemkey PostgreSQL schema, version 7: the charges of the payment provider
-- simulator (`idemkey-server provider`). A charge belongs to a scope (the
-- hex SHA-256 of the caller's bearer secret) and its idempotency key; the
-- primary key keeps one charge per (scope, key) even when the provider's
-- idempotency layer re-executes a request whose lease ended. Every unique
-- key includes the scope (the distribution invariant of tests/schema.rs).
CREATE TABLE provider_charges (
    scope           text NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              uuid NOT NULL,
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    order_id        uuid NOT NULL,
    amount_cents    bigint NOT NULL CHECK (amount_cents > 0),
    currency        text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, idempotency_key),
    UNIQUE (scope, id)
);
-- `GET /charges`: a scope's charges in the order they were made.
CREATE INDEX provider_charges_scope_seq ON provider_charges (scope, seq);
