-- idemkey schema, version 5: every key of a table that holds an account's
-- data includes the account, so the tables can be distributed by account
-- (for example Citus, with account_id as distribution column) without
-- losing a constraint. An order is only ever looked up with its account.
ALTER TABLE orders DROP CONSTRAINT orders_pkey;
ALTER TABLE orders ADD PRIMARY KEY (account_id, id);
