-- Demo mode's start, after its account rows exist: revokes every token of
-- the accounts demo mode made (the previous start's), so only the tokens
-- this start adds next work.
UPDATE api_tokens SET revoked_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE revoked_at IS NULL
  AND account_id IN (SELECT id FROM accounts WHERE demo_slot IS NOT NULL)
