-- Forgets in-flight claim ?4. ?1 scope, ?2 operation, ?3 key.
DELETE FROM idempotency_records
WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND claim = ?4 AND status = 'in_flight'
