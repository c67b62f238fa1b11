-- An effect to deliver, in the transaction of the change it belongs to.
-- Its id is the row's rowid (last_insert_rowid), which costs nothing:
-- RETURNING would buffer the row in a table of its own.
-- ?1 scope, ?2 operation, ?3 key, ?4 effect, ?5 resource id, ?6 payload.
INSERT INTO outbox (scope, operation, key, effect, resource_id, payload, available_at, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
        CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
