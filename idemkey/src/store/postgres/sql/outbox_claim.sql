-- Claims up to $1 due messages of the effects $4 for $2 ms: pending, due,
-- and not held by a live lease (a crashed worker's lease ends at the
-- store's clock, and another worker takes its messages over). SKIP LOCKED:
-- two workers never wait for each other, nor claim the same message.
-- The messages chosen come out of an InitPlan as an array of their keys
-- (scope, id), and the update probes the primary key once per message. A
-- join on a subquery instead lets the generic plan (the sessions force
-- generic plans) guess a tenth of the due rows for `LIMIT $1` and, with a
-- backlog in the statistics, hash-join them against a walk of the whole
-- primary key: every claim then read every message the outbox holds,
-- delivered ones included, and the worker slowed as the table grew
-- (69-117 ms per claim at 90,000 rows, against under 1 ms).
-- $1 how many, $2 lease ms, $3 lease, $4 effects.
UPDATE outbox m
SET lease = $3::uuid,
    lease_until = statement_timestamp() + $2::int8 * interval '1 millisecond',
    attempts = m.attempts + 1
FROM unnest(ARRAY(
    SELECT ROW(scope, id) FROM outbox
    WHERE status = 'pending' AND available_at <= statement_timestamp()
      AND (lease_until IS NULL OR lease_until <= statement_timestamp())
      AND effect = ANY ($4::text[])
    ORDER BY available_at
    LIMIT $1::int8
    FOR UPDATE SKIP LOCKED
)) AS due (scope text, id bigint)
WHERE m.scope = due.scope AND m.id = due.id
RETURNING m.id, m.scope, m.operation, m.key, m.effect, m.resource_id, m.payload, m.attempts,
          m.downstream_key,
          (extract(epoch FROM statement_timestamp() - m.created_at) * 1000)::int8 AS age_ms
