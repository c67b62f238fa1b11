-- Sends dead letters back to pending, due now, with a fresh budget of
-- attempts. ?1 id, or NULL for every dead letter.
UPDATE outbox
SET status = 'pending', attempts = 0,
    available_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER), settled_at = NULL
WHERE status = 'dead' AND (?1 IS NULL OR id = ?1)
