-- The status CHECK without an IN list, as records/2 (why: there): every
-- enqueue and every settlement ran it. The table is rebuilt with its rows
-- and their ids (an application keeps a message's id to find it again).
CREATE TABLE outbox_next (
    id             INTEGER PRIMARY KEY,
    scope          TEXT NOT NULL,
    operation      TEXT NOT NULL,
    key            TEXT NOT NULL,
    effect         TEXT NOT NULL CHECK (length(effect) BETWEEN 1 AND 32),
    resource_id    TEXT,
    payload        TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status = 'pending' OR status = 'delivered' OR status = 'failed'
                          OR status = 'dead'),
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
INSERT INTO outbox_next
    (id, scope, operation, key, effect, resource_id, payload, status, attempts, available_at,
     lease_until, lease, downstream_key, result, last_error, created_at, settled_at)
SELECT id, scope, operation, key, effect, resource_id, payload, status, attempts, available_at,
       lease_until, lease, downstream_key, result, last_error, created_at, settled_at
FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_next RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead';
CREATE INDEX outbox_flow_step ON outbox (scope, resource_id) WHERE effect = 'flow-step';
