-- The caller's order with this id. ?1 account, ?2 order id.
SELECT sku, quantity, created_at FROM orders WHERE account_id = ?1 AND id = ?2
