-- What an account holds for (operation, key). ?1 account, ?2 operation, ?3 key.
SELECT fingerprint, status, response_status, response_headers, response_body,
       created_at, replay_until, lease_until, resource_id
FROM idempotency_records
WHERE account_id = ?1 AND operation = ?2 AND key = ?3
