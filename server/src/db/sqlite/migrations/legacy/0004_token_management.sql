-- idemkey SQLite schema, version 4 (as the PostgreSQL one): token ids,
-- last use, revocation, and the mark of demo mode's own accounts. SQLite
-- cannot add a NOT NULL UNIQUE column with a random default, so the tokens
-- table is rebuilt; existing tokens keep working and get a random UUID.
-- Times are milliseconds since the epoch.
CREATE TABLE api_tokens_v4 (
    token_hash   BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    id           TEXT NOT NULL UNIQUE,
    account_id   TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL DEFAULT (unixepoch() * 1000),
    last_used_at INTEGER,
    revoked_at   INTEGER
);
INSERT INTO api_tokens_v4 (token_hash, id, account_id, created_at)
SELECT token_hash,
       lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||
             substr(hex(randomblob(2)), 2) || '-' ||
             substr('89ab', 1 + abs(random() % 4), 1) || substr(hex(randomblob(2)), 2) ||
             '-' || hex(randomblob(6))),
       account_id, created_at
FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_v4 RENAME TO api_tokens;
CREATE INDEX api_tokens_account ON api_tokens (account_id);
ALTER TABLE accounts ADD COLUMN demo_slot INTEGER CHECK (demo_slot IN (1, 2));
CREATE INDEX accounts_demo_slot ON accounts (demo_slot) WHERE demo_slot IS NOT NULL;
