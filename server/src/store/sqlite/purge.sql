-- ?1 forget_before, ?2 batch size.
DELETE FROM idempotency_records
WHERE rowid IN (SELECT rowid FROM idempotency_records
                WHERE status = 'tombstone' AND created_at < ?1 LIMIT ?2);
