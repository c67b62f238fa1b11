SELECT fingerprint, claim, status, lease_until, replay_until,
       response_status, response_headers, response_body
FROM idempotency_leases
WHERE scope = ?1 AND operation = ?2 AND key = ?3
