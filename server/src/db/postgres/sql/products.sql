-- The catalogue.
SELECT sku, unit_price_cents, currency FROM products
