-- Each order keeps the id of its charge in the outbox, so that reading an
-- order finds its payment by the outbox's primary key (scope, id) and the
-- outbox needs no index on resource_id. No foreign key: the outbox is the
-- library's table, and settled messages may be trimmed.
ALTER TABLE orders ADD COLUMN charge_message bigint;
-- Orders made before: their charge, matched by the order's id (the first
-- one, should there be more).
UPDATE orders o SET charge_message = m.id
FROM (SELECT scope, resource_id, min(id) AS id FROM outbox
      WHERE effect = 'charge' GROUP BY scope, resource_id) m
WHERE m.scope = o.account_id::text AND m.resource_id = o.id::text;
