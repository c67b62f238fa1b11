-- provider-sim version 3 (PostgreSQL): the simulator's two more downstream
-- effects, deduplicated by key exactly as its charges are, and a request
-- log that tells the effects apart. Every unique key includes the scope
-- (the distribution invariant of server/tests/schema.rs).

-- The mail sink: one confirmation per (scope, key), even when the
-- idempotency layer re-executes a request whose lease ended.
CREATE TABLE provider_confirmations (
    scope           text NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              uuid NOT NULL,
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    order_id        uuid NOT NULL,
    recipient       text NOT NULL CHECK (length(recipient) BETWEEN 1 AND 254),
    message         text NOT NULL CHECK (length(message) BETWEEN 1 AND 2000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, idempotency_key),
    UNIQUE (scope, id)
);
-- `GET /confirmations`: a scope's confirmations in the order they were made.
CREATE INDEX provider_confirmations_scope_seq ON provider_confirmations (scope, seq);

-- Refunds: one per (scope, key), and at most one per charge (the second
-- unique key), of a charge of the same scope (the foreign key), for the
-- charge's whole amount (copied with its order and currency).
CREATE TABLE provider_refunds (
    scope           text NOT NULL CHECK (length(scope) BETWEEN 1 AND 128),
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              uuid NOT NULL,
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    charge_id       uuid NOT NULL,
    order_id        uuid NOT NULL,
    amount_cents    bigint NOT NULL CHECK (amount_cents > 0),
    currency        text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, idempotency_key),
    UNIQUE (scope, id),
    UNIQUE (scope, charge_id),
    FOREIGN KEY (scope, charge_id) REFERENCES provider_charges (scope, id)
);
-- `GET /refunds`: a scope's refunds in the order they were made.
CREATE INDEX provider_refunds_scope_seq ON provider_refunds (scope, seq);

-- The request log names each row's effect; a handler's run is named after
-- its effect (`charge`, `confirmation`, `refund`). Rows logged before this
-- version are the charges'. The default keeps a binary of version 2 able
-- to log its charge requests into a database of version 3.
ALTER TABLE provider_requests
    DROP CONSTRAINT provider_requests_kind_check,
    ADD CONSTRAINT provider_requests_kind_check
        CHECK (kind IN ('request', 'lookup', 'charge', 'confirmation', 'refund')),
    ADD COLUMN effect text NOT NULL DEFAULT 'charges'
        CHECK (effect IN ('charges', 'confirmations', 'refunds')),
    ADD CONSTRAINT provider_requests_run_of_its_effect
        CHECK (kind IN ('request', 'lookup') OR kind || 's' = effect);
