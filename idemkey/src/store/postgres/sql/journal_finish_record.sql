-- The key's record replays the final response for the window asked,
-- counted from now (the flow's end). The window asked is the stored one
-- less the open window (36525 days) a running execution is stored with,
-- or, for a record stored before flows kept their window open, all of it.
UPDATE idempotency_records
SET response_status = $4::int4,
    response_headers = $5::text,
    response_body = $6::bytea,
    (replay_until, check_at) = (
        SELECT w.until, w.until FROM (SELECT statement_timestamp()
            + (CASE WHEN replay_until - created_at >= interval '36525 days'
                    THEN replay_until - created_at - interval '36525 days'
                    ELSE replay_until - created_at END) AS until) w)
WHERE scope = $1::text AND operation = $2::text AND key = $3::text
  AND resource_id = $7::text AND status = 'completed'
