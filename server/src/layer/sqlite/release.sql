-- Forgets claim ?4 (its handler answered 5xx), only while it holds the row.
DELETE FROM idempotency_leases
WHERE scope = ?1 AND operation = ?2 AND key = ?3 AND claim = ?4 AND status = 'in_flight'
