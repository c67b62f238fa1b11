-- The newest execution of a key.
SELECT id
FROM idemkey_flows
WHERE scope = $1::text AND operation = $2::text AND key = $3::text
ORDER BY created_at DESC LIMIT 1
