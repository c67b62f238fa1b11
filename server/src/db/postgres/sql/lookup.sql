-- The caller's account and what it holds for (operation, key), with the
-- store's clock; no row at all for an unknown token.
-- $1 token_hash, $2 operation, $3 key.
-- The account reaches the record's lookup as a scalar subquery, not a join
-- column, so no statistics can turn the lookup into a scan of the whole
-- index (see create_order.sql).
WITH caller AS (
    SELECT account_id FROM api_tokens WHERE token_hash = $1::bytea AND revoked_at IS NULL
)
SELECT c.account_id, statement_timestamp() AS now, r.fingerprint, r.claim, r.status,
       r.lease_until, r.replay_until, r.created_at, r.response_status, r.response_headers,
       r.response_body, r.resource_id
FROM caller c
LEFT JOIN idempotency_records r
  ON r.scope = (SELECT account_id::text FROM caller) AND r.operation = $2::text
 AND r.key = $3::text
