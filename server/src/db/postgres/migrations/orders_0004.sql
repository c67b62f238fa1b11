-- A product's stock split over 32 rows (stripes), so that purchases of one
-- product do not all wait for one row's lock until the previous purchase
-- committed: a purchase takes its quantity from one stripe it can lock at
-- once, or, when none of those has enough, from several (every stripe
-- locked in order). A product's stock is the sum of its stripes.
CREATE TABLE product_stock (
    sku    text NOT NULL REFERENCES products (sku) ON DELETE CASCADE,
    stripe smallint NOT NULL CHECK (stripe BETWEEN 0 AND 31),
    stock  integer NOT NULL CHECK (stock >= 0),
    PRIMARY KEY (sku, stripe)
);
INSERT INTO product_stock (sku, stripe, stock)
SELECT p.sku, s, p.stock / 32 + CASE WHEN s < p.stock % 32 THEN 1 ELSE 0 END
FROM products p, generate_series(0, 31) s;
ALTER TABLE products DROP COLUMN stock;
-- A product added later starts with the stock a new product had before
-- (1,000,000), split over its stripes.
CREATE FUNCTION product_stock_stripes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO product_stock (sku, stripe, stock)
    SELECT NEW.sku, s, 31250 FROM generate_series(0, 31) s;
    RETURN NULL;
END $$;
CREATE TRIGGER product_stock_stripes AFTER INSERT ON products
    FOR EACH ROW EXECUTE FUNCTION product_stock_stripes();
