-- Ends the claims of a batch of messages in one statement, each only if
-- its own lease still holds it: delivered, failed or dead for good, or
-- pending again after its delay at the store's clock (a postponed one, never
-- sent, with its attempt taken back). The ids returned are those settled;
-- the others' leases ended and another worker took them over.
-- One element per message in each array: $1 id, $2 lease, $3 status,
-- $4 result, $5 last error, $6 delay ms, $7 the downstream key sent,
-- $8 scope, $9 sent (false: postponed).
UPDATE outbox m
SET status = s.status,
    result = s.result,
    last_error = COALESCE(s.last_error, m.last_error),
    downstream_key = s.sent_key,
    attempts = CASE WHEN s.sent THEN m.attempts ELSE m.attempts - 1 END,
    available_at = CASE WHEN s.status = 'pending'
                        THEN statement_timestamp() + s.delay_ms * interval '1 millisecond'
                        ELSE m.available_at END,
    settled_at = CASE WHEN s.status = 'pending' THEN NULL ELSE statement_timestamp() END,
    lease = NULL,
    lease_until = NULL
FROM unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int8[],
            $7::text[], $8::text[], $9::bool[])
     AS s(id, lease, status, result, last_error, delay_ms, sent_key, scope, sent)
WHERE m.scope = s.scope AND m.id = s.id AND m.lease = s.lease AND m.status = 'pending'
RETURNING m.scope, m.id
