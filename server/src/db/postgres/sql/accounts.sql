-- Accounts with their count of tokens not revoked, oldest first: all of
-- them when $1 is NULL, else those whose id or name is $1.
SELECT a.id, a.name, a.created_at, a.demo_slot IS NOT NULL AS demo,
       (SELECT count(*) FROM api_tokens t
        WHERE t.account_id = a.id AND t.revoked_at IS NULL) AS active_tokens
FROM accounts a
WHERE $1::text IS NULL OR a.id::text = $1::text OR a.name = $1::text
ORDER BY a.created_at, a.id
