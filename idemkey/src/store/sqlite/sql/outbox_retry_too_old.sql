-- The messages outbox_retry.sql would send back but for their age: older
-- than the provider's key retention, at the store's clock, and not forced.
-- ?1 id, or NULL for every dead letter; ?2 key retention ms; ?3 force.
SELECT id FROM outbox
WHERE CASE WHEN ?1 IS NULL THEN status = 'dead' ELSE id = ?1 AND status IN ('dead', 'failed') END
  AND NOT ?3 AND CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - created_at >= ?2
ORDER BY id
