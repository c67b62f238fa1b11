-- A completion that is a HOT update. The maintenance indexes were partial
-- on `status` and keyed on `replay_until` / `lease_until`, all of which a
-- completion changes, so every completion wrote a new row version with new
-- entries in the primary key and the replay index. One index now keys on
-- when maintenance next looks at a row (`check_at`, set by the claim,
-- moved only by maintenance and take-over): a completion touches no
-- indexed column, and the free space the fill factor keeps in each page
-- lets its new version stay on its page. A row whose `check_at` is NULL
-- (written by a statement that does not set it) is looked at from its
-- creation on. Adding the column rewrites nothing; existing rows get their
-- `check_at` from maintenance, a batch at a time.
ALTER TABLE idempotency_records ADD COLUMN check_at timestamptz;
ALTER TABLE idempotency_records SET (fillfactor = 85);
CREATE INDEX idempotency_records_check ON idempotency_records ((COALESCE(check_at, created_at)));
DROP INDEX IF EXISTS idempotency_records_replay;
DROP INDEX IF EXISTS idempotency_records_created;
DROP INDEX IF EXISTS idempotency_records_lease;
