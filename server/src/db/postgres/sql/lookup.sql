-- The caller's account and what it holds for (operation, key), with the
-- store's clock; no row at all for an unknown token.
-- $1 token_hash, $2 operation, $3 key.
SELECT c.account_id, statement_timestamp() AS now, r.fingerprint, r.claim, r.status,
       r.lease_until, r.replay_until, r.created_at, r.response_status, r.response_headers,
       r.response_body, r.resource_id
FROM api_tokens c
LEFT JOIN idempotency_records r
  ON r.scope = c.account_id::text AND r.operation = $2::text AND r.key = $3::text
WHERE c.token_hash = $1::bytea AND c.revoked_at IS NULL
