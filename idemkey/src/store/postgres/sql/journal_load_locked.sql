-- An execution of a scope by id, locked until the transaction ends.
SELECT id, scope, operation, key, flow, state, position, input,
       failed_step, error, response_status, response_headers, response_body
FROM idemkey_flows
WHERE scope = $1::text AND id = $2::uuid FOR UPDATE
