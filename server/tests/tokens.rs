//! Accounts and tokens through the real CLI and real server processes: create,
//! list and revoke; a revoked token refused at once by every process on the
//! database; `last_used_at` written in batches at the database's clock;
//! retention flags checked at start-up; SQLite files private to their owner.

#[macro_use]
mod common;

use common::{BODY, Backend, Env, eventually, new_key, refused_at_start};

/// The token on the last line of a command's stdout.
fn last_line(stdout: &str) -> String {
    stdout.lines().last().expect("a last line").to_owned()
}

/// The rows of a tab-separated listing, header checked and dropped.
fn rows(stdout: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some(header), "{stdout}");
    lines
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

/// `token list ACCOUNT`: `[id, created, last used, revoked]` per token.
fn tokens(env: &Env, account: &str) -> Vec<Vec<String>> {
    let (ok, out, err) = env.cli(&["token", "list", account]);
    assert!(ok, "{err}");
    rows(&out, "ID\tCREATED\tLAST_USED\tREVOKED")
}

/// `account list`: `[id, created, tokens, kind, name]` per account.
fn accounts(env: &Env) -> Vec<Vec<String>> {
    let (ok, out, err) = env.cli(&["account", "list"]);
    assert!(ok, "{err}");
    rows(&out, "ID\tCREATED\tTOKENS\tKIND\tNAME")
}

fn hex(token: &str) -> String {
    idemkey_server::auth::hash_token(token)
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The CLI: tokens are created (printed once, last line), listed by id
/// (never the token or its hash), revoked; ACCOUNT is an id or a name that
/// only one account has.
async fn the_cli_creates_lists_and_revokes_tokens(backend: Backend) {
    let env = Env::new(backend);
    let first = env.account("shop");
    env.account("twin");
    env.account("twin");
    let listed = accounts(&env);
    assert_eq!(listed.len(), 3);
    let shop = listed.iter().find(|a| a[4] == "shop").unwrap().clone();
    assert_eq!((shop[2].as_str(), shop[3].as_str()), ("1", "account"));

    let (ok, out, err) = env.cli(&["token", "create", "shop"]);
    assert!(ok, "{err}");
    let second = last_line(&out);
    assert!(second.starts_with("idk_") && second != first, "{out}");
    let (ok, out, err) = env.cli(&["token", "create", &shop[0]]);
    assert!(ok, "{err}");
    let third = last_line(&out);

    let (ok, _, err) = env.cli(&["token", "create", "twin"]);
    assert!(!ok);
    assert!(err.contains("2 accounts are named \"twin\""), "{err}");
    let (ok, _, err) = env.cli(&["token", "create", "nobody"]);
    assert!(!ok);
    assert!(err.contains("no account has the id or name"), "{err}");

    let (_, out, _) = env.cli(&["token", "list", "shop"]);
    for secret in [&first, &second, &third] {
        assert!(
            !out.contains(secret.as_str()) && !out.contains(&hex(secret)),
            "{out}"
        );
    }
    let listed = tokens(&env, "shop");
    assert_eq!(listed.len(), 3);
    assert!(
        listed.iter().all(|t| t[2] == "-" && t[3] == "-"),
        "{listed:?}"
    );
    assert_eq!(
        accounts(&env).iter().find(|a| a[4] == "shop").unwrap()[2],
        "3"
    );

    let server = env.serve(&[]);
    for token in [&first, &second, &third] {
        assert_eq!(server.get(token, "/orders").await.status, 200);
    }
    // Tokens are listed oldest first: revoke the second one.
    let (ok, out, err) = env.cli(&["token", "revoke", &listed[1][0]]);
    assert!(ok, "{err}");
    assert!(out.contains("revoked at"), "{out}");
    server
        .get(&second, "/orders")
        .await
        .assert_problem(401, "unauthorized");
    assert_eq!(server.get(&first, "/orders").await.status, 200);
    assert_eq!(server.get(&third, "/orders").await.status, 200);
    let (ok, out, _) = env.cli(&["token", "revoke", &listed[1][0]]);
    assert!(ok && out.contains("already revoked"), "{out}");
    let unknown = uuid::Uuid::new_v4().to_string();
    let (ok, _, err) = env.cli(&["token", "revoke", &unknown]);
    assert!(!ok && err.contains("no token has the id"), "{err}");

    let listed = tokens(&env, "shop");
    assert_ne!(listed[1][3], "-", "revoked time shown");
    assert_eq!((listed[0][3].as_str(), listed[2][3].as_str()), ("-", "-"));
    assert_eq!(
        accounts(&env).iter().find(|a| a[4] == "shop").unwrap()[2],
        "2"
    );
}

/// Two server processes on one database, their replay caches off: a token
/// revoked through the CLI gets 401 from both at the next request, for new
/// orders, replays, reads and lookups alike; the account's other token
/// keeps working. (With the cache on, a replay it holds is refused within
/// `--auth-cache-ttl`: tests/replay_cache.rs.)
async fn a_revoked_token_is_refused_by_every_process_at_once(backend: Backend) {
    let env = Env::new(backend);
    let keep = env.account("shop");
    let (_, out, _) = env.cli(&["token", "create", "shop"]);
    let revoked = last_line(&out);
    let a = env.serve(&["--replay-cache-mib", "0"]);
    let b = env.serve(&["--replay-cache-mib", "0"]);
    let key = new_key();
    assert_eq!(a.post_order(&revoked, &key, BODY).await.status, 201);
    let replay = b.post_order(&revoked, &key, BODY).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    let id = tokens(&env, "shop")[1][0].clone();
    let (ok, _, err) = env.cli(&["token", "revoke", &id]);
    assert!(ok, "{err}");
    let lookup = format!("/operations/{}", key.trim_matches('"'));
    for server in [&a, &b] {
        server
            .post_order(&revoked, &key, BODY)
            .await
            .assert_problem(401, "unauthorized");
        server
            .post_order(&revoked, &new_key(), BODY)
            .await
            .assert_problem(401, "unauthorized");
        server
            .get(&revoked, "/orders")
            .await
            .assert_problem(401, "unauthorized");
        server
            .get(&revoked, &lookup)
            .await
            .assert_problem(401, "unauthorized");
        assert_eq!(
            server.get(&keep, &lookup).await.json()["state"],
            "completed"
        );
    }
    assert_eq!(env.counts(), (1, 1), "nothing more was created");
}

/// `last_used_at` is written by the batch, not per request: a token used
/// through a server shows a last use (at the database's clock, not before
/// its creation) once the interval has passed; an unused token shows none.
async fn last_use_appears_after_the_flush(backend: Backend) {
    let env = Env::new(backend);
    let used = env.account("shop");
    env.cli(&["token", "create", "shop"]);
    let server = env.serve(&["--token-last-used-interval", "200ms"]);
    assert!(tokens(&env, "shop").iter().all(|t| t[2] == "-"));
    assert_eq!(server.post_order(&used, &new_key(), BODY).await.status, 201);
    let mut listed = Vec::new();
    eventually("the used token's last use is recorded", async || {
        listed = tokens(&env, "shop");
        listed[0][2] != "-"
    })
    .await;
    // RFC 3339 in UTC with milliseconds: these compare as text.
    assert!(listed[0][2] >= listed[0][1], "{listed:?}");
    assert_eq!(listed[1][2], "-", "the unused token: {listed:?}");
}

/// The tombstone must outlive the replay window, or there is no 410 period:
/// refused at start-up, from flags and from the environment alike.
#[test]
fn a_tombstone_ttl_not_longer_than_the_replay_ttl_is_refused() {
    let url = "sqlite:///nonexistent-dir/never-opened.db";
    let flags = ["serve", "--database-url", url, "--replay-ttl", "1h"];
    let err = refused_at_start(&[&flags[..], &["--tombstone-ttl", "1h"]].concat(), &[]);
    assert!(
        err.contains(
            "--tombstone-ttl (IDEMKEY_TOMBSTONE_TTL, 1h) must be longer than --replay-ttl"
        ),
        "{err}"
    );
    let err = refused_at_start(
        &["serve", "--database-url", url],
        &[
            ("IDEMKEY_REPLAY_TTL", "2d"),
            ("IDEMKEY_TOMBSTONE_TTL", "1d"),
        ],
    );
    assert!(err.contains("must be longer than --replay-ttl"), "{err}");
    assert!(
        !err.contains("cannot open"),
        "refused before the database: {err}"
    );
}

/// SQLite files (the database, its WAL and shared memory) are created 0600;
/// a file that other users could read is tightened, with a log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |path: &str| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .permissions()
            .mode()
            & 0o777
    };
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let server = env.serve(&[]);
    assert_eq!(
        server.post_order(&token, &new_key(), BODY).await.status,
        201
    );
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", env.db);
        assert_eq!(mode(&file), 0o600, "{file}");
    }
    drop(server);

    let loose = Env::new(Backend::Sqlite);
    std::fs::write(&loose.db, b"").unwrap();
    std::fs::set_permissions(&loose.db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, _, err) = loose.cli(&["migrate"]);
    assert!(ok, "{err}");
    assert!(err.contains("mode tightened"), "{err}");
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", loose.db);
        if std::path::Path::new(&file).exists() {
            assert_eq!(mode(&file), 0o600, "{file}");
        }
    }
    assert_eq!(mode(&loose.db), 0o600);
}

on_each_backend!(
    the_cli_creates_lists_and_revokes_tokens,
    a_revoked_token_is_refused_by_every_process_at_once,
    last_use_appears_after_the_flush,
);
