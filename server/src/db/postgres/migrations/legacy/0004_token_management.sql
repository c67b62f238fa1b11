-- idemkey schema, version 4: token management and demo accounts.
--   api_tokens.id: what `token list` shows and `token revoke` takes (the
--                  token and its hash are never shown);
--   last_used_at:  written by each server process for the tokens it saw,
--                  in one UPDATE every --token-last-used-interval, at the
--                  database's clock (so precise to that interval);
--   revoked_at:    a revoked token authenticates nothing (every statement
--                  that reads a token checks it, so no process caches it);
--   accounts.demo_slot: NULL for every account `account create` made; 1 and
--                  2 for the two accounts demo mode made for itself, which
--                  it finds by this mark, never by name.
ALTER TABLE api_tokens ADD COLUMN id uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_id_key UNIQUE (id);
ALTER TABLE api_tokens ADD COLUMN last_used_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN revoked_at timestamptz;
ALTER TABLE accounts ADD COLUMN demo_slot smallint CHECK (demo_slot IN (1, 2));
CREATE INDEX accounts_demo_slot ON accounts (demo_slot) WHERE demo_slot IS NOT NULL;
