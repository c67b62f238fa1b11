-- A flow that ended in its first transaction: its window, stored open,
-- counts from now (the window asked: as in journal_finish_record.sql).
UPDATE idempotency_records
SET (replay_until, check_at) = (
        SELECT w.until, w.until FROM (SELECT statement_timestamp()
            + (CASE WHEN replay_until - created_at >= interval '36525 days'
                    THEN replay_until - created_at - interval '36525 days'
                    ELSE replay_until - created_at END) AS until) w)
WHERE scope = $1::text AND operation = $2::text AND key = $3::text
  AND resource_id = $4::text AND status = 'completed'
  AND replay_until - created_at >= interval '36525 days'
