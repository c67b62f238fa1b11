-- Messages committed with the change that asks for them, delivered later
-- by a worker under a lease, at least once, with a derived downstream key.
CREATE TABLE outbox (
    id             INTEGER PRIMARY KEY,
    scope          TEXT NOT NULL,
    operation      TEXT NOT NULL,
    key            TEXT NOT NULL,
    effect         TEXT NOT NULL CHECK (length(effect) BETWEEN 1 AND 32),
    resource_id    TEXT,
    payload        TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    available_at   INTEGER NOT NULL,
    lease_until    INTEGER,
    lease          TEXT,
    downstream_key TEXT,
    result         TEXT,
    last_error     TEXT,
    created_at     INTEGER NOT NULL,
    settled_at     INTEGER,
    CHECK ((status = 'pending') = (settled_at IS NULL))
);
CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_resource ON outbox (scope, resource_id, effect);
CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead';
