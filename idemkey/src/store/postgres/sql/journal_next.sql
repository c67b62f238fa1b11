-- The pending (or dead) message of an execution, and whether an earlier
-- attempt may have reached the downstream.
SELECT status, attempts, last_error, (attempts > 0 OR downstream_key IS NOT NULL)
FROM outbox
WHERE scope = $1::text
  AND resource_id = $2::text
  AND effect = 'flow-step'
  AND status IN ('pending', 'dead')
ORDER BY id DESC LIMIT 1
