-- Sends messages back to pending, due now, with a fresh budget of attempts
-- (their downstream key stays recorded, so the next attempt looks the
-- effect up first): one dead or failed message by id, or every dead letter,
-- younger than the provider's key retention (at the store's clock) unless
-- forced. Run after outbox_retry_too_old.sql, in the same transaction.
-- ?1 id, or NULL for every dead letter; ?2 key retention ms; ?3 force.
UPDATE outbox
SET status = 'pending', attempts = 0,
    available_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER), settled_at = NULL,
    last_error = CASE WHEN status = 'failed' THEN result ELSE last_error END,
    result = NULL
WHERE CASE WHEN ?1 IS NULL THEN status = 'dead' ELSE id = ?1 AND status IN ('dead', 'failed') END
  AND (?3 OR CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - created_at < ?2)
