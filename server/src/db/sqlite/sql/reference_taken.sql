-- The account's order that holds a purchase reference. ?1 account, ?2 reference.
SELECT id FROM orders WHERE account_id = ?1 AND reference = ?2
