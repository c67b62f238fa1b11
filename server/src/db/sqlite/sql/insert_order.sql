-- The order of a claimed key, inside the claim's savepoint, with its
-- amount and its charge's id in the outbox (enqueued just before, in the
-- same savepoint), when its price is the catalogue's (else nothing is
-- inserted and the savepoint, charge and all, is rolled back).
-- ?1 id, ?2 account, ?3 sku, ?4 quantity, ?5 created_at (ms), ?6 unit price
-- in cents, ?7 currency, ?8 reference (or NULL), ?9 amount in cents,
-- ?10 the charge's outbox id.
INSERT INTO orders (id, account_id, sku, quantity, created_at, amount_cents, currency, reference,
                    charge_message)
SELECT ?1, ?2, ?3, ?4, ?5, ?9, ?7, ?8, ?10
WHERE EXISTS (SELECT 1 FROM products WHERE sku = ?3 AND unit_price_cents = ?6 AND currency = ?7)
