-- The caller's newest orders with their payments, newest first.
-- ?1 account, ?2 how many. Each payment is the order's charge, found by
-- the outbox's id (see order.sql).
SELECT o.id, o.sku, o.quantity, o.reference, o.amount_cents, o.currency, o.created_at,
       m.status, m.result, m.last_error, m.attempts
FROM (SELECT * FROM orders WHERE account_id = ?1 ORDER BY created_at DESC, id DESC LIMIT ?2) o
LEFT JOIN outbox m ON m.scope = o.account_id AND m.id = o.charge_message AND m.resource_id = o.id
ORDER BY o.created_at DESC, o.id DESC
