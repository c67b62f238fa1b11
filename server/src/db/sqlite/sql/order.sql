-- The caller's order with its payment. ?1 account, ?2 order id. The
-- payment is the order's charge, found by the outbox's id; its resource_id
-- confirms it is this order's (SQLite may give a new row the id of a
-- deleted last one).
SELECT o.id, o.sku, o.quantity, o.reference, o.amount_cents, o.currency, o.created_at,
       m.status, m.result, m.last_error, m.attempts
FROM orders o
LEFT JOIN outbox m ON m.scope = o.account_id AND m.id = o.charge_message AND m.resource_id = o.id
WHERE o.account_id = ?1 AND o.id = ?2
