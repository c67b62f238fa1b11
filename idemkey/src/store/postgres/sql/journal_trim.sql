-- Up to $2 executions that ended more than $1 ms ago (their steps with
-- them), at the database's clock.
DELETE FROM idemkey_flows WHERE (scope, id) IN (
        SELECT scope, id FROM idemkey_flows
        WHERE state IN ('done', 'failed')
          AND updated_at < statement_timestamp() - $1::int8 * interval '1 millisecond'
        LIMIT $2::int8
        FOR UPDATE SKIP LOCKED)
