-- What the caller's account holds for (operation, key), or no row for an
-- unknown token. $1 token_hash, $2 operation, $3 key.
SELECT c.account_id IS NOT NULL AS known, r.fingerprint, r.status, r.response_status,
       r.response_headers::text AS response_headers, r.response_body, r.created_at,
       r.replay_until, r.lease_until, r.resource_id
FROM api_tokens c
LEFT JOIN idempotency_records r
  ON r.account_id = c.account_id AND r.operation = $2::text AND r.key = $3::text
WHERE c.token_hash = $1::bytea
