-- Claims the key with the finished response in the same row (the order is
-- inserted next, in the same BEGIN IMMEDIATE transaction). No row changes
-- when the key is taken. ?1 account, ?2 operation, ?3 key, ?4 fingerprint,
-- ?5 response_body, ?6 response_headers, ?7 created_at, ?8 replay_until,
-- ?9 resource id.
INSERT INTO idempotency_records
    (account_id, operation, key, fingerprint, status, response_status,
     response_headers, response_body, created_at, replay_until, resource_id)
VALUES (?1, ?2, ?3, ?4, 'completed', 201, ?6, ?5, ?7, ?8, ?9)
ON CONFLICT (account_id, operation, key) DO NOTHING
