-- Sends a dead letter back to pending, due now, with a fresh budget of
-- attempts (its downstream key stays recorded, so its next attempt looks
-- the effect up first). $1 id, or NULL for every dead letter.
UPDATE outbox
SET status = 'pending', attempts = 0, available_at = statement_timestamp(), settled_at = NULL
WHERE status = 'dead' AND ($1::int8 IS NULL OR id = $1::int8)
