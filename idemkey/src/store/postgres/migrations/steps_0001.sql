-- Operations of several steps: one row per execution of a key whose
-- operation declared a flow, and one row per step recorded. A step's row,
-- its effects and the next step's outbox message commit together (the
-- recovery point); the primary key (scope, flow_id, idx) makes a second
-- recording of one step impossible whatever a stale worker believes. Every
-- key starts with the scope, as the records' do (distribution by account).
-- Constraints are named (as PostgreSQL would name them under no prefix):
-- a generated name past 63 bytes is shortened differently.
CREATE TABLE idemkey_flows (
    id               uuid NOT NULL,
    scope            text NOT NULL,
    operation        text NOT NULL,
    key              text NOT NULL,
    flow             text NOT NULL,
    state            text NOT NULL
                     CONSTRAINT idemkey_flows_state_check
                     CHECK (state IN ('running', 'compensating', 'done', 'failed')),
    position         integer NOT NULL CONSTRAINT idemkey_flows_position_check CHECK (position >= 0),
    input            text NOT NULL,
    failed_step      text,
    error            text,
    response_status  integer CONSTRAINT idemkey_flows_response_status_check
                     CHECK (response_status BETWEEN 100 AND 599),
    response_headers text,
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT idemkey_flows_pkey PRIMARY KEY (scope, id),
    CONSTRAINT idemkey_flows_check
    CHECK ((state IN ('done', 'failed')) = (response_status IS NOT NULL))
);
CREATE INDEX idemkey_flows_key ON idemkey_flows (scope, operation, key, created_at);
CREATE INDEX idemkey_flows_open ON idemkey_flows (updated_at) WHERE state IN ('running', 'compensating');
-- The trim task deletes ended executions past the records' retention.
CREATE INDEX idemkey_flows_ended ON idemkey_flows (updated_at) WHERE state IN ('done', 'failed');
CREATE TABLE idemkey_steps (
    scope          text NOT NULL,
    flow_id        uuid NOT NULL,
    idx            integer NOT NULL CONSTRAINT idemkey_steps_idx_check CHECK (idx >= 0),
    name           text NOT NULL,
    state          text NOT NULL
                   CONSTRAINT idemkey_steps_state_check
                   CHECK (state IN ('done', 'failed', 'compensated')),
    output         text,
    attempts       integer NOT NULL DEFAULT 1,
    downstream_key text,
    recorded_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    compensated_at timestamptz,
    CONSTRAINT idemkey_steps_pkey PRIMARY KEY (scope, flow_id, idx),
    CONSTRAINT idemkey_steps_scope_flow_id_fkey
    FOREIGN KEY (scope, flow_id) REFERENCES idemkey_flows (scope, id) ON DELETE CASCADE
);
