-- The caller's order with its payment. ?1 account, ?2 order id.
SELECT o.id, o.sku, o.quantity, o.reference, o.amount_cents, o.currency, o.created_at,
       m.status, m.result, m.last_error, m.attempts
FROM orders o
LEFT JOIN outbox m ON m.scope = o.account_id AND m.resource_id = o.id AND m.effect = 'charge'
WHERE o.account_id = ?1 AND o.id = ?2
