-- Stores the response of in-flight claim $4, replayed for $5 ms from the
-- store's clock. $1 scope, $2 operation, $3 key, $6 status, $7 headers,
-- $8 body (NULL when not stored), $9 resource id. No indexed column
-- changes (see records/2), so the new row version is a HOT update when its
-- page has room.
UPDATE idempotency_records
SET status = 'completed', lease_until = NULL,
    replay_until = statement_timestamp() + $5 * interval '1 millisecond',
    response_status = $6, response_headers = $7, response_body = $8, resource_id = $9
WHERE scope = $1 AND operation = $2 AND key = $3 AND claim = $4 AND status = 'in_flight'
