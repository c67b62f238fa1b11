-- Operations of several steps: one row per execution of a key whose
-- operation declared a flow, and one row per step recorded. A step's row,
-- its effects and the next step's outbox message commit together (the
-- recovery point); the primary key (scope, flow_id, idx) makes a second
-- recording of one step impossible whatever a stale worker believes. Every
-- key starts with the scope, as the records' do (distribution by account). Times are
-- milliseconds since the epoch at the database's clock.
CREATE TABLE idemkey_flows (
    id               TEXT NOT NULL,
    scope            TEXT NOT NULL,
    operation        TEXT NOT NULL,
    key              TEXT NOT NULL,
    flow             TEXT NOT NULL,
    state            TEXT NOT NULL
                     CHECK (state IN ('running', 'compensating', 'done', 'failed')),
    position         INTEGER NOT NULL CHECK (position >= 0),
    input            TEXT NOT NULL,
    failed_step      TEXT,
    error            TEXT,
    response_status  INTEGER CHECK (response_status BETWEEN 100 AND 599),
    response_headers TEXT,
    response_body    BLOB,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (scope, id),
    CHECK ((state IN ('done', 'failed')) = (response_status IS NOT NULL))
);
CREATE INDEX idemkey_flows_key ON idemkey_flows (scope, operation, key, created_at);
CREATE INDEX idemkey_flows_open ON idemkey_flows (updated_at) WHERE state IN ('running', 'compensating');
-- The trim task deletes ended executions past the records' retention.
CREATE INDEX idemkey_flows_ended ON idemkey_flows (updated_at) WHERE state IN ('done', 'failed');
CREATE TABLE idemkey_steps (
    scope          TEXT NOT NULL,
    flow_id        TEXT NOT NULL,
    idx            INTEGER NOT NULL CHECK (idx >= 0),
    name           TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('done', 'failed', 'compensated')),
    output         TEXT,
    attempts       INTEGER NOT NULL DEFAULT 1,
    downstream_key TEXT,
    recorded_at    INTEGER NOT NULL,
    compensated_at INTEGER,
    PRIMARY KEY (scope, flow_id, idx),
    FOREIGN KEY (scope, flow_id) REFERENCES idemkey_flows (scope, id) ON DELETE CASCADE
) WITHOUT ROWID;
