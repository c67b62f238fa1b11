-- An execution's recorded steps, by index.
SELECT idx, name, state, output, attempts, downstream_key
FROM idemkey_steps
WHERE scope = $1::text AND flow_id = $2::uuid
ORDER BY idx
