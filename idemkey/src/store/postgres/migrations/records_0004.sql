-- records/3 dropped the record's CHECK constraints by the names PostgreSQL
-- generates (`<table>_<column>_check`). Under a prefix of 23 or 24
-- characters that name passes 63 bytes, and PostgreSQL shortens the
-- generated name differently from the way it truncates the one records/3
-- spelled out, so the DROP missed and a CHECK stayed (re-planned by every
-- write). Drops what is left of them, found by column rather than by
-- name; the table's row type (`NULL::idempotency_records`) names the table
-- under the store's prefix. New databases name every constraint
-- explicitly (records/1), so this finds nothing there.
DO $$
DECLARE
    leftover text;
BEGIN
    FOR leftover IN
        SELECT con.conname
        FROM pg_constraint con
        JOIN pg_attribute att
          ON att.attrelid = con.conrelid AND att.attnum = con.conkey[1]
        WHERE con.conrelid = (SELECT typrelid FROM pg_type
                              WHERE oid = pg_typeof(NULL::idempotency_records))
          AND con.contype = 'c'
          AND cardinality(con.conkey) = 1
          AND att.attname IN ('key', 'fingerprint', 'status', 'response_status')
          AND con.conname LIKE '%\_check'
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I',
                       pg_typeof(NULL::idempotency_records), leftover);
    END LOOP;
END
$$;
