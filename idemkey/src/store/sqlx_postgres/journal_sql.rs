//! The step journal's statements, as the tokio-postgres backend writes
//! them inline in its flow.rs (repeated here until they live in `.sql`
//! files both backends include), every parameter typed in the SQL.

pub(super) const LOAD: &str = "SELECT id, scope, operation, key, flow, state, position, input, failed_step, \
     error, response_status, response_headers, response_body FROM idemkey_flows \
     WHERE scope = $1::text AND id = $2::uuid";
pub(super) const LOAD_LOCKED: &str = "SELECT id, scope, operation, key, flow, state, position, input, \
     failed_step, error, response_status, response_headers, response_body FROM idemkey_flows \
     WHERE scope = $1::text AND id = $2::uuid FOR UPDATE";
pub(super) const INSERT_FLOW: &str = "INSERT INTO idemkey_flows (id, scope, operation, key, flow, state, \
     position, input) VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, \
     $7::int4, $8::text)";
pub(super) const STEPS: &str = "SELECT idx, name, state, output, attempts, downstream_key FROM idemkey_steps \
                     WHERE scope = $1::text AND flow_id = $2::uuid ORDER BY idx";
pub(super) const SETTLE: &str = "UPDATE outbox SET status = 'delivered', result = 'recorded', \
     downstream_key = $3::text, settled_at = statement_timestamp(), lease = NULL, \
     lease_until = NULL \
     WHERE scope = $4::text AND id = $1::int8 AND lease = $2::uuid AND status = 'pending' \
       AND lease_until > statement_timestamp()";
pub(super) const INSERT_STEP: &str = "INSERT INTO idemkey_steps (scope, flow_id, idx, name, state, output, \
     attempts, downstream_key) VALUES ($8::text, $1::uuid, $2::int4, $3::text, $4::text, \
     $5::text, $6::int4, $7::text)";
pub(super) const COMPENSATED: &str = "UPDATE idemkey_steps SET state = 'compensated', \
     compensated_at = statement_timestamp() \
     WHERE scope = $3::text AND flow_id = $1::uuid AND idx = $2::int4 AND state = 'done'";
pub(super) const UPDATE_FLOW: &str = "UPDATE idemkey_flows SET state = $2::text, position = $3::int4, \
     failed_step = $4::text, error = $5::text, response_status = $6::int4, \
     response_headers = $7::text, response_body = $8::bytea, \
     updated_at = statement_timestamp() WHERE scope = $9::text AND id = $1::uuid";
pub(super) const ENQUEUE: &str = include_str!("../postgres/sql/enqueue.sql");
/// The replay window a flow's record asked for: its window less the open
/// one it was stored with (36525 days).
macro_rules! asked_window {
    () => {
        "(CASE WHEN replay_until - created_at >= interval '36525 days' \
         THEN replay_until - created_at - interval '36525 days' \
         ELSE replay_until - created_at END)"
    };
}
pub(super) const FINISH_RECORD: &str = concat!(
    "UPDATE idempotency_records SET response_status = $4::int4, \
     response_headers = $5::text, response_body = $6::bytea, \
     replay_until = statement_timestamp() + ",
    asked_window!(),
    ", check_at = statement_timestamp() + ",
    asked_window!(),
    " WHERE scope = $1::text AND operation = $2::text AND key = $3::text \
       AND resource_id = $7::text AND status = 'completed'"
);
pub(super) const CLOSE_WINDOW: &str = concat!(
    "UPDATE idempotency_records SET replay_until = statement_timestamp() + ",
    asked_window!(),
    ", check_at = statement_timestamp() + ",
    asked_window!(),
    " WHERE scope = $1::text AND operation = $2::text AND key = $3::text \
       AND resource_id = $4::text AND status = 'completed' \
       AND replay_until - created_at >= interval '36525 days'"
);
pub(super) const FIND: &str = "SELECT id FROM idemkey_flows WHERE scope = $1::text AND operation = $2::text \
                    AND key = $3::text ORDER BY created_at DESC LIMIT 1";
pub(super) const NEXT: &str = "SELECT status, attempts, last_error, \
     (attempts > 0 OR downstream_key IS NOT NULL) FROM outbox \
     WHERE scope = $1::text AND resource_id = $2::text AND effect = 'flow-step' \
       AND status IN ('pending', 'dead') ORDER BY id DESC LIMIT 1";
pub(super) const RESUME: &str = "UPDATE outbox SET available_at = statement_timestamp(), \
     status = 'pending', settled_at = NULL \
     WHERE scope = $1::text AND resource_id = $2::text AND effect = 'flow-step' \
       AND ((status = 'pending' AND available_at > statement_timestamp()) \
         OR (status = 'dead' \
             AND created_at > statement_timestamp() - $3::int8 * interval '1 millisecond'))";
