//! The order service's binary over TLS to PostgreSQL, against a cluster that
//! accepts TCP connections over TLS only (certificates made by the testkit
//! for `localhost`): `migrate`, `account create`, `serve` and `fixture` with
//! libpq's `sslmode` and `sslrootcert` in the URL, end to end, and every
//! command's report of a refused certificate. What each `sslmode` and root
//! does is the library's, tested in `idemkey/tests/tls.rs`.

use std::process::{Command, Output};

use idemkey_testkit::{PgOptions, SERVER_NAME};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

mod common;
use common::{BIN, BODY, Backend, Env, Server, new_key};

/// A database on a TLS-only cluster of the test's own.
fn tls_env() -> Env {
    Env::with_own_cluster(Backend::Postgres, PgOptions::new().tls_only())
}

/// A URL to the test's database via `host`, with these query parameters.
fn url(env: &Env, host: &str, params: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/{}?{params}",
        env.cluster().port(),
        env.db
    )
}

fn encoded(path: std::path::PathBuf) -> String {
    utf8_percent_encode(path.to_str().expect("utf-8 path"), NON_ALPHANUMERIC).to_string()
}

/// `sslrootcert=` the CA that signed the server's certificate.
fn right_ca(env: &Env) -> String {
    format!(
        "sslrootcert={}",
        encoded(env.cluster().tls().expect("TLS").ca_file())
    )
}

/// `sslrootcert=` a CA unrelated to the server.
fn wrong_ca(env: &Env) -> String {
    format!(
        "sslrootcert={}",
        encoded(env.cluster().tls().expect("TLS").other_ca_file())
    )
}

/// Runs a CLI command of the binary; bounded, so a command that wrongly
/// starts serving fails the test instead of hanging it.
fn cli(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(BIN)
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run idemkey-server")
}

fn migrate(url: &str) -> Output {
    cli(&["migrate", "--database-url", url])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the command failed (not timed out) and said `expected`.
fn assert_refused(out: &Output, expected: &str) {
    let err = stderr(out);
    assert!(
        !out.status.success() && out.status.code() != Some(124),
        "{:?}: {err}",
        out.status
    );
    assert!(err.contains(expected), "expected {expected:?} in: {err}");
}

/// Sessions of `application_name` idemkey-server, split by TLS.
fn sessions(env: &Env) -> (u64, u64) {
    let count = |ssl: bool| -> u64 {
        env.sql(&format!(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE application_name = 'idemkey-server' AND ssl = {ssl}"
        ))
        .parse()
        .expect("a count")
    };
    (count(true), count(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_right_ca_serves_the_cli_orders_and_replays() {
    let mut env = tls_env();
    env.url = url(
        &env,
        SERVER_NAME,
        &format!("sslmode=verify-full&{}", right_ca(&env)),
    );
    let out = migrate(&env.url);
    assert!(out.status.success(), "migrate: {}", stderr(&out));
    assert_eq!(env.sql("SELECT to_regclass('orders') IS NOT NULL"), "t");
    let token = env.account("tls");
    let server = env.serve(&[]);
    let key = new_key();
    let first = server.post_order(&token, &key, BODY).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let second = server.post_order(&token, &key, BODY).await;
    assert_eq!(second.status, 201, "{}", second.body);
    assert_eq!(second.body, first.body);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(env.counts(), (1, 1));
    let (tls, plain) = sessions(&env);
    assert!(
        tls > 0 && plain == 0,
        "TLS sessions {tls}, plaintext {plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_runs_over_verify_full() {
    let env = tls_env();
    let url = url(
        &env,
        SERVER_NAME,
        &format!("sslmode=verify-full&{}", right_ca(&env)),
    );
    let fixture = Server::fixture(&["--database-url", &url]);
    let post = async || {
        let response = fixture
            .client
            .post(format!("{}/echo", fixture.base))
            .header("idempotency-key", "\"tls-layer-1\"")
            .header("content-type", "application/json")
            .body(r#"{"pay":1}"#)
            .send()
            .await
            .expect("send");
        let replayed = response.headers().contains_key("idempotent-replayed");
        (
            response.status().as_u16(),
            replayed,
            response.text().await.expect("body"),
        )
    };
    let (status, replayed, body) = post().await;
    assert_eq!((status, replayed), (201, false), "{body}");
    assert_eq!(post().await, (201, true, body));
    assert_eq!(fixture.handler_runs().await, 1);
    assert_eq!(env.count("idempotency_records"), 1);
}

#[test]
fn every_command_reports_a_refused_certificate() {
    let env = tls_env();
    let expected =
        "TLS to PostgreSQL failed: the server's certificate is not signed by a CA in sslrootcert";
    let bad = url(
        &env,
        SERVER_NAME,
        &format!("sslmode=verify-full&{}", wrong_ca(&env)),
    );
    assert_refused(&migrate(&bad), expected);
    assert_refused(
        &cli(&["account", "create", "x", "--database-url", &bad]),
        expected,
    );
    for command in ["serve", "fixture"] {
        let out = cli(&[command, "--database-url", &bad, "--bind", "127.0.0.1:0"]);
        assert_refused(&out, expected);
    }
    assert_eq!(env.sql("SELECT to_regclass('accounts') IS NULL"), "t");
}
