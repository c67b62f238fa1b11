-- The state CHECKs without an IN list of three or more, as records/2 (why:
-- there): every start, step and state change of a flow ran them. Both
-- tables are rebuilt; the new step table references the new flow table
-- from the start, so dropping the old ones deletes no step (the foreign
-- key's cascade), and renaming the new flow table carries the reference.
CREATE TABLE idemkey_flows_next (
    id               TEXT NOT NULL,
    scope            TEXT NOT NULL,
    operation        TEXT NOT NULL,
    key              TEXT NOT NULL,
    flow             TEXT NOT NULL,
    state            TEXT NOT NULL
                     CHECK (state = 'running' OR state = 'compensating' OR state = 'done'
                            OR state = 'failed'),
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
INSERT INTO idemkey_flows_next
    (id, scope, operation, key, flow, state, position, input, failed_step, error,
     response_status, response_headers, response_body, created_at, updated_at)
SELECT id, scope, operation, key, flow, state, position, input, failed_step, error,
       response_status, response_headers, response_body, created_at, updated_at
FROM idemkey_flows;
CREATE TABLE idemkey_steps_next (
    scope          TEXT NOT NULL,
    flow_id        TEXT NOT NULL,
    idx            INTEGER NOT NULL CHECK (idx >= 0),
    name           TEXT NOT NULL,
    state          TEXT NOT NULL
                   CHECK (state = 'done' OR state = 'failed' OR state = 'compensated'),
    output         TEXT,
    attempts       INTEGER NOT NULL DEFAULT 1,
    downstream_key TEXT,
    recorded_at    INTEGER NOT NULL,
    compensated_at INTEGER,
    PRIMARY KEY (scope, flow_id, idx),
    FOREIGN KEY (scope, flow_id) REFERENCES idemkey_flows_next (scope, id) ON DELETE CASCADE
) WITHOUT ROWID;
INSERT INTO idemkey_steps_next
    (scope, flow_id, idx, name, state, output, attempts, downstream_key, recorded_at,
     compensated_at)
SELECT scope, flow_id, idx, name, state, output, attempts, downstream_key, recorded_at,
       compensated_at
FROM idemkey_steps;
DROP TABLE idemkey_steps;
DROP TABLE idemkey_flows;
ALTER TABLE idemkey_flows_next RENAME TO idemkey_flows;
ALTER TABLE idemkey_steps_next RENAME TO idemkey_steps;
CREATE INDEX idemkey_flows_key ON idemkey_flows (scope, operation, key, created_at);
CREATE INDEX idemkey_flows_open ON idemkey_flows (updated_at) WHERE state IN ('running', 'compensating');
CREATE INDEX idemkey_flows_ended ON idemkey_flows (updated_at) WHERE state IN ('done', 'failed');
