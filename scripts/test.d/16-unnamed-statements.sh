#!/usr/bin/env bash
# Behind a transaction pooler no named statement: one place decides how a
# statement is sent to PostgreSQL (idemkey/src/store/postgres/send.rs, for
# the store's PgPooler), and every query of the library and the order
# service goes through it. tokio-postgres's forms that take the SQL text
# and prepare a named statement (`query`, `query_one`, `query_opt`,
# `query_raw`, `execute`, `execute_raw`, `prepare*`) therefore appear only
# in send.rs:
# - in the PostgreSQL code (idemkey/src/store/postgres/,
#   server/src/db/postgres/): none of them, outside send.rs;
# - anywhere else in idemkey/src and server/src, outside the SQLite code
#   (whose rusqlite calls share the names `execute` and `prepare*`): none
#   of the forms only tokio-postgres has (`query_one`, `query_opt`,
#   `query_raw`, `execute_raw`, `prepare_typed*`).
# The unnamed forms (`query_typed`, `execute_typed`, `batch_execute`,
# `simple_query`) and send.rs's `query_pooled`/`query_in` are allowed.
# The checker runs first on scratch files it must flag (a checker that
# cannot fail proves nothing), then on the tree.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

ALL='\.(query|query_one|query_opt|query_raw|execute|execute_raw|prepare|prepare_cached|prepare_typed|prepare_typed_cached)\('
PG_ONLY='\.(query_one|query_opt|query_raw|execute_raw|prepare_typed|prepare_typed_cached)\('

# Prints every offending line under ROOT; fails when there is one.
check() {
    local root=$1 found=0 file
    while IFS= read -r file; do
        case $file in
            */store/postgres/send.rs) continue ;;
            */store/postgres/* | */db/postgres/*) pattern=$ALL ;;
            */sqlite/*) continue ;;
            *) pattern=$PG_ONLY ;;
        esac
        # Comments may name the forms (as this rule does).
        if grep -nE "$pattern" "$file" | grep -vE '^[0-9]+:\s*//' | sed "s|^|$file:|" | grep .; then
            found=1
        fi
    done < <(find "$root/idemkey/src" "$root/server/src" -name '*.rs' 2>/dev/null | sort)
    return $found
}

# Self-test: a named statement on a pooled client in each kind of place.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/idemkey/src/store/postgres" "$scratch/server/src/db/postgres" \
    "$scratch/server/src/routes" "$scratch/server/src/db/sqlite"
printf 'let rows = client.query(SQL, &[]).await?;\n' >"$scratch/idemkey/src/store/postgres/outbox.rs"
printf 'let row = client\n    .query_opt(ACCOUNT, &[&token])\n' >"$scratch/server/src/db/postgres/accounts.rs"
printf 'let n = conn.query_one("SELECT 1", &[]).await?;\n' >"$scratch/server/src/routes/readyz.rs"
printf 'conn.execute("DELETE FROM t", [])?;\n' >"$scratch/server/src/db/sqlite/orders.rs"
printf 'let s = conn.prepare_typed_cached(sql, &types).await?;\n' \
    >"$scratch/idemkey/src/store/postgres/send.rs"
flagged=$(check "$scratch" || true)
for expect in postgres/outbox.rs db/postgres/accounts.rs routes/readyz.rs; do
    grep -q "$expect" <<<"$flagged" || {
        echo "16-unnamed-statements.sh: the self-test's $expect was not flagged" >&2
        exit 1
    }
done
if grep -qE 'sqlite/orders.rs|postgres/send.rs' <<<"$flagged"; then
    echo "16-unnamed-statements.sh: the self-test flagged an allowed file:" >&2
    echo "$flagged" >&2
    exit 1
fi

if ! check .; then
    echo "16-unnamed-statements.sh: a statement that names itself outside" \
        "idemkey/src/store/postgres/send.rs (see above): send it through" \
        "PgDb::query_pooled/execute_pooled or postgres::query_in/execute_in" >&2
    exit 1
fi
echo "16-unnamed-statements.sh: every PostgreSQL statement goes through send.rs"
