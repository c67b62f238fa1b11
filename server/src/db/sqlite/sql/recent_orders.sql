-- The caller's newest orders, newest first. ?1 account, ?2 how many.
SELECT id, sku, quantity, created_at FROM orders WHERE account_id = ?1
ORDER BY created_at DESC, id DESC LIMIT ?2
