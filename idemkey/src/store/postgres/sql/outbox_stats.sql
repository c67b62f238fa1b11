-- Messages not delivered yet, the age of the oldest (ms) and the dead
-- letters, at the store's clock; each count reads a partial index.
SELECT (SELECT count(*) FROM outbox WHERE status = 'pending') AS pending,
       (SELECT (extract(epoch FROM statement_timestamp() - min(created_at)) * 1000)::int8
        FROM outbox WHERE status = 'pending') AS oldest_ms,
       (SELECT count(*) FROM outbox WHERE status = 'dead') AS dead
