-- Ends a claim, if this lease still holds it (see the PostgreSQL statement).
-- ?1 id, ?2 lease, ?3 status, ?4 result, ?5 last error, ?6 delay ms,
-- ?7 the downstream key sent, ?8 1 for a postponed claim (never sent: its
-- attempt is taken back), else 0.
UPDATE outbox
SET status = ?3,
    attempts = attempts - ?8,
    result = ?4,
    last_error = COALESCE(?5, last_error),
    downstream_key = ?7,
    available_at = CASE WHEN ?3 = 'pending'
                        THEN CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?6
                        ELSE available_at END,
    settled_at = CASE WHEN ?3 = 'pending' THEN NULL
                      ELSE CAST(round(unixepoch('subsec') * 1000) AS INTEGER) END,
    lease = NULL,
    lease_until = NULL
WHERE id = ?1 AND lease = ?2 AND status = 'pending'
