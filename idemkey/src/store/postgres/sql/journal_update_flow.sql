-- An execution's state, position, failure and final response.
UPDATE idemkey_flows
SET state = $2::text,
    position = $3::int4,
    failed_step = $4::text,
    error = $5::text,
    response_status = $6::int4,
    response_headers = $7::text,
    response_body = $8::bytea,
    updated_at = statement_timestamp()
WHERE scope = $9::text AND id = $1::uuid
