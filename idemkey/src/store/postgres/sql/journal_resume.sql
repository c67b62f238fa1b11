-- The next step due now: a backoff cut short (a live claim is left
-- alone), or a dead letter younger than $3 ms sent back to pending with
-- its attempts kept (so the next one looks the effect up first).
UPDATE outbox
SET available_at = statement_timestamp(), status = 'pending', settled_at = NULL
WHERE scope = $1::text
  AND resource_id = $2::text
  AND effect = 'flow-step'
  AND ((status = 'pending' AND available_at > statement_timestamp())
       OR (status = 'dead' AND created_at > statement_timestamp() - $3::int8 * interval '1 millisecond'))
