-- The order of a claimed key, inside the claim's transaction.
-- ?1 id, ?2 account, ?3 sku, ?4 quantity, ?5 created_at (ms).
INSERT INTO orders (id, account_id, sku, quantity, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
