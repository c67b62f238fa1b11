-- A step's message settled as delivered, if this claim still holds it
-- (its lease, not yet ended at the database's clock).
UPDATE outbox
SET status = 'delivered',
    result = 'recorded',
    downstream_key = $3::text,
    settled_at = statement_timestamp(),
    lease = NULL,
    lease_until = NULL
WHERE scope = $4::text
  AND id = $1::int8
  AND lease = $2::uuid
  AND status = 'pending'
  AND lease_until > statement_timestamp()
