-- One maintenance batch, second statement: tombstones, and claims abandoned
-- with their lease, older than the retention are deleted.
-- ?1 retention ms, ?2 batch size.
DELETE FROM idempotency_records
WHERE rowid IN (SELECT rowid FROM idempotency_records
                WHERE status = 'tombstone' AND created_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1 LIMIT ?2)
   OR rowid IN (SELECT rowid FROM idempotency_records
                WHERE status = 'in_flight' AND lease_until < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1 LIMIT ?2)
