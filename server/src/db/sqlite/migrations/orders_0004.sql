-- A product's stock split over 32 rows (stripes), as on PostgreSQL (where
-- it keeps purchases of one product from waiting for one row's lock; here
-- every write is serial anyway, and a purchase takes from any stripe with
-- enough). A product's stock is the sum of its stripes.
CREATE TABLE product_stock (
    sku    TEXT NOT NULL REFERENCES products (sku) ON DELETE CASCADE,
    stripe INTEGER NOT NULL CHECK (stripe BETWEEN 0 AND 31),
    stock  INTEGER NOT NULL CHECK (stock >= 0),
    PRIMARY KEY (sku, stripe)
) WITHOUT ROWID;
INSERT INTO product_stock (sku, stripe, stock)
WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 31)
SELECT p.sku, s.n, p.stock / 32 + CASE WHEN s.n < p.stock % 32 THEN 1 ELSE 0 END
FROM products p, s;
ALTER TABLE products DROP COLUMN stock;
-- A product added later starts with the stock a new product had before
-- (1,000,000), split over its stripes.
CREATE TRIGGER product_stock_stripes AFTER INSERT ON products
BEGIN
    INSERT INTO product_stock (sku, stripe, stock)
    SELECT NEW.sku, column1, 31250 FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13),
        (14), (15), (16), (17), (18), (19), (20), (21), (22), (23), (24), (25), (26), (27), (28), (29), (30), (31));
END;
