//! TLS to PostgreSQL, against a cluster that accepts TCP connections over
//! TLS only (`hostssl` lines, certificates made by the testkit for
//! `localhost`): the real binary's `migrate`, `account create`, `serve` and
//! `fixture` with libpq's `sslmode` and `sslrootcert` in the URL.

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
fn a_certificate_from_another_ca_is_refused_with_a_clear_error() {
    let env = tls_env();
    let expected =
        "TLS to PostgreSQL failed: the server's certificate is not signed by a CA in sslrootcert";
    for mode in ["verify-full", "verify-ca", "require"] {
        // libpq: `require` with a root certificate checks the chain.
        let bad = url(
            &env,
            SERVER_NAME,
            &format!("sslmode={mode}&{}", wrong_ca(&env)),
        );
        assert_refused(&migrate(&bad), expected);
    }
    let bad = url(
        &env,
        SERVER_NAME,
        &format!("sslmode=verify-full&{}", wrong_ca(&env)),
    );
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

#[test]
fn a_wrong_host_name_fails_under_verify_full_and_passes_under_verify_ca() {
    let env = tls_env();
    // The certificate names `localhost` only.
    let full = url(
        &env,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", right_ca(&env)),
    );
    assert_refused(
        &migrate(&full),
        "the server's certificate does not name the host in the URL",
    );
    assert_eq!(env.sql("SELECT to_regclass('orders') IS NULL"), "t");
    // The key=value form, with a quoted path.
    let ca = env.cluster().tls().expect("TLS").ca_file();
    let ca_only = format!(
        "host=127.0.0.1 port={} user=postgres dbname={} sslmode=verify-ca sslrootcert='{}'",
        env.cluster().port(),
        env.db,
        ca.display()
    );
    let out = migrate(&ca_only);
    assert!(out.status.success(), "verify-ca: {}", stderr(&out));
    assert_eq!(env.sql("SELECT to_regclass('orders') IS NOT NULL"), "t");
}

#[test]
fn the_cluster_refuses_sslmode_disable() {
    let env = tls_env();
    let plain = url(&env, SERVER_NAME, "sslmode=disable");
    assert_refused(&migrate(&plain), "no pg_hba.conf entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_checking_the_certificate() {
    let mut env = tls_env();
    // 127.0.0.1 is not in the certificate, and no root is given: require
    // checks neither.
    env.url = url(&env, "127.0.0.1", "sslmode=require");
    let token = env.account("tls");
    let server = env.serve(&[]);
    let reply = server.post_order(&token, &new_key(), BODY).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let (tls, plain) = sessions(&env);
    assert!(
        tls > 0 && plain == 0,
        "TLS sessions {tls}, plaintext {plain}"
    );
}

#[test]
fn the_default_prefer_uses_tls_when_the_server_offers_it() {
    let env = tls_env();
    // No sslmode: libpq's `prefer`. Only a TLS session gets in here.
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{}",
        env.cluster().port(),
        env.db
    );
    let out = migrate(&url);
    assert!(out.status.success(), "prefer: {}", stderr(&out));
}

#[test]
fn require_and_stricter_never_fall_back_to_plaintext() {
    let mut env = tls_env();
    // The server stops offering TLS; its pg_hba.conf still wants it.
    env.cluster_mut()
        .set_setting("ssl", "off")
        .expect("ssl off");
    for params in [
        "sslmode=require".to_owned(),
        format!("sslmode=verify-ca&{}", right_ca(&env)),
        format!("sslmode=verify-full&{}", right_ca(&env)),
    ] {
        let url = url(&env, SERVER_NAME, &params);
        assert_refused(&migrate(&url), "server does not support TLS");
    }
    // `prefer` does fall back, and the server's rules then refuse it.
    let prefer = url(&env, SERVER_NAME, "sslmode=prefer");
    assert_refused(&migrate(&prefer), "no pg_hba.conf entry");
}

#[test]
fn system_roots_do_not_trust_a_private_ca() {
    let env = tls_env();
    let system = url(&env, SERVER_NAME, "sslrootcert=system");
    let out = migrate(&system);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("not signed by a CA in sslrootcert") || err.contains("no trusted roots found"),
        "{err}"
    );
    assert_refused(
        &migrate(&format!("{system}&sslmode=require")),
        "sslmode=require may not be used with sslrootcert=system",
    );
}

#[test]
fn a_password_login_is_bound_to_the_tls_channel() {
    let mut env = tls_env();
    env.sql(&format!(
        "SET password_encryption = 'scram-sha-256';\n\
         CREATE ROLE app LOGIN PASSWORD 'pw-1';\n\
         ALTER DATABASE {} OWNER TO app;",
        env.db
    ));
    let hba = env.cluster().data_dir().join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    std::fs::write(
        &hba,
        format!("hostssl all app 127.0.0.1/32 scram-sha-256\n{rules}"),
    )
    .expect("write pg_hba.conf");
    // Reloads the configuration (pg_hba.conf with it) and waits for it.
    env.cluster_mut()
        .set_setting("password_encryption", "scram-sha-256")
        .expect("reload");
    let login = |password: &str| {
        format!(
            "postgres://app:{password}@{SERVER_NAME}:{}/{}?sslmode=verify-full&{}&channel_binding=require",
            env.cluster().port(),
            env.db,
            right_ca(&env)
        )
    };
    // SCRAM-SHA-256-PLUS: the password proof covers the server's certificate.
    let out = migrate(&login("pw-1"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        env.sql("SELECT tableowner FROM pg_tables WHERE tablename = 'orders'"),
        "app"
    );
    assert_refused(&migrate(&login("pw-2")), "password authentication failed");
}
