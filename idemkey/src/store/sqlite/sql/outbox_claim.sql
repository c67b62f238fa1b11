-- Claims up to ?1 due messages for ?2 ms (see the PostgreSQL statement;
-- SQLite has one writer, so no row is ever claimed twice at once).
-- ?1 how many, ?2 lease ms, ?3 lease, ?4 effects (a JSON array).
UPDATE outbox
SET lease = ?3,
    lease_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?2,
    attempts = attempts + 1
WHERE id IN (
    SELECT id FROM outbox
    WHERE status = 'pending' AND available_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
      AND (lease_until IS NULL OR lease_until <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
      AND effect IN (SELECT value FROM json_each(?4))
    ORDER BY available_at
    LIMIT ?1
)
RETURNING id, scope, operation, key, effect, resource_id, payload, attempts, downstream_key,
          CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - created_at AS age_ms
