-- What a key holds, with the store's clock: always one row (NULL columns
-- when the key holds nothing). $1 scope, $2 operation, $3 key.
SELECT statement_timestamp() AS now, r.fingerprint, r.claim, r.status, r.lease_until,
       r.replay_until, r.created_at, r.response_status, r.response_headers,
       r.response_body, r.resource_id
FROM (SELECT 1) AS one
LEFT JOIN idempotency_records r ON r.scope = $1 AND r.operation = $2 AND r.key = $3
