-- Messages committed with the change that asks for them, delivered later
-- by a worker under a lease, at least once, with a derived downstream key.
-- Constraints are named (as PostgreSQL would name them under no prefix):
-- a generated name past 63 bytes is shortened differently.
CREATE TABLE outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY,
    scope          text NOT NULL,
    operation      text NOT NULL,
    key            text NOT NULL,
    effect         text NOT NULL
                   CONSTRAINT outbox_effect_check CHECK (effect ~ '^[a-z][a-z0-9-]{0,31}$'),
    resource_id    text,
    payload        text NOT NULL,
    status         text NOT NULL DEFAULT 'pending'
                   CONSTRAINT outbox_status_check CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts       integer NOT NULL DEFAULT 0,
    available_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    lease_until    timestamptz,
    lease          uuid,
    downstream_key text,
    result         text,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    settled_at     timestamptz,
    CONSTRAINT outbox_pkey PRIMARY KEY (scope, id),
    CONSTRAINT outbox_check CHECK ((status = 'pending') = (settled_at IS NULL))
);
CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_resource ON outbox (scope, resource_id, effect);
CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead';
