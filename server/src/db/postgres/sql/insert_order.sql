-- The order of a claimed key, inside the claim's transaction (a take-over
-- or a re-execution): its charge in the outbox, and the order with its
-- amount and its charge's id, unless its price is not the catalogue's or
-- another order holds its reference (then nothing is inserted and `taken`
-- names that order).
-- $1 id, $2 account, $3 sku, $4 quantity, $5 created_at, $6 unit price in
-- cents, $7 currency, $8 reference (or NULL), $9 amount in cents,
-- $10 operation, $11 key, $12 the charge's outbox payload.
WITH product AS (
    SELECT 1 FROM products
    WHERE sku = $3::text AND unit_price_cents = $6::int8 AND currency = $7::text
), taken AS (
    SELECT id FROM orders WHERE account_id = $2::uuid AND reference = $8::text
), charge AS (
    INSERT INTO outbox (scope, operation, key, effect, resource_id, payload)
    SELECT $2::uuid::text, $10::text, $11::text, 'charge', $1::uuid::text, $12::text
    WHERE EXISTS (SELECT 1 FROM product) AND NOT EXISTS (SELECT 1 FROM taken)
    RETURNING id
), new_order AS (
    INSERT INTO orders (id, account_id, sku, quantity, created_at, amount_cents, currency,
                        reference, charge_message)
    SELECT $1::uuid, $2::uuid, $3::text, $4::int4, $5::timestamptz, $9::int8, $7::text, $8::text,
           charge.id
    FROM charge
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM new_order) AS created, (SELECT id FROM taken) AS taken
