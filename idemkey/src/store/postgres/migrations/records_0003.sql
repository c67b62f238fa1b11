-- The record's invariants, checked by one trigger instead of seven CHECK
-- constraints. PostgreSQL 15 rebuilds a table's CHECK expressions from
-- their stored text and plans them again for every statement that writes
-- the table: on the Layer's two statements per key (claim, completion)
-- that was a sixth of the database's work. A PL/pgSQL trigger keeps its
-- plan for the session's life. Same rules, same SQLSTATE (23514), and a
-- NULL condition passes, as it does for a CHECK.
CREATE FUNCTION idempotency_records_valid() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (length(NEW.key) BETWEEN 1 AND 255
            AND length(NEW.fingerprint) = 32
            AND NEW.status IN ('in_flight', 'completed', 'tombstone')
            AND (NEW.response_status IS NULL OR NEW.response_status BETWEEN 100 AND 599)
            AND (NEW.status = 'in_flight') = (NEW.lease_until IS NOT NULL)
            AND (NEW.status = 'completed') = (NEW.response_status IS NOT NULL)
            AND (NEW.status = 'in_flight' OR NEW.replay_until IS NOT NULL)) THEN
        RAISE check_violation USING MESSAGE = 'an idempotency record breaks its invariants';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER idempotency_records_valid BEFORE INSERT OR UPDATE ON idempotency_records
    FOR EACH ROW EXECUTE FUNCTION idempotency_records_valid();
ALTER TABLE idempotency_records
    DROP CONSTRAINT IF EXISTS idempotency_records_key_check,
    DROP CONSTRAINT IF EXISTS idempotency_records_fingerprint_check,
    DROP CONSTRAINT IF EXISTS idempotency_records_status_check,
    DROP CONSTRAINT IF EXISTS idempotency_records_response_status_check,
    DROP CONSTRAINT IF EXISTS idempotency_records_check1,
    DROP CONSTRAINT IF EXISTS idempotency_records_completed,
    DROP CONSTRAINT IF EXISTS idempotency_records_window;
