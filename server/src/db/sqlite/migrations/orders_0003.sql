-- Each order keeps the id of its charge in the outbox, so that reading an
-- order finds its payment by the outbox's primary key and the outbox needs
-- no index on resource_id. No foreign key: the outbox is the library's
-- table, and settled messages may be trimmed.
ALTER TABLE orders ADD COLUMN charge_message INTEGER;
-- Orders made before: their charge, matched by the order's id (the first
-- one, should there be more).
UPDATE orders SET charge_message = m.id
FROM (SELECT scope, resource_id, min(id) AS id FROM outbox
      WHERE effect = 'charge' GROUP BY scope, resource_id) m
WHERE m.scope = orders.account_id AND m.resource_id = orders.id;
