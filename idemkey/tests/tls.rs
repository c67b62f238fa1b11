//! TLS to PostgreSQL through the library (`postgres-tls`), against a
//! cluster that accepts TCP connections over TLS only (`hostssl` lines,
//! certificates made by the testkit for `localhost`): `Db::open` with
//! libpq's `sslmode` and `sslrootcert` in the URL, and the `StoreError`s a
//! bad root, host name or mode gets. The order service's binary over TLS
//! (its CLI and server) is `server/tests/tls.rs`.

use idemkey::store::StoreSettings;
use idemkey::{Db, StoreError};
use idemkey_testkit::{Backend, PgOptions, SERVER_NAME, TestDb};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// A database on a TLS-only cluster of the test's own.
fn tls_db() -> TestDb {
    TestDb::with_own_cluster(Backend::Postgres, PgOptions::new().tls_only())
}

/// A URL to the test's database via `host`, with these query parameters.
fn url(db: &TestDb, host: &str, params: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/{}?{params}",
        db.cluster().port(),
        db.db
    )
}

fn encoded(path: std::path::PathBuf) -> String {
    utf8_percent_encode(path.to_str().expect("utf-8 path"), NON_ALPHANUMERIC).to_string()
}

/// `sslrootcert=` the CA that signed the server's certificate.
fn right_ca(db: &TestDb) -> String {
    format!(
        "sslrootcert={}",
        encoded(db.cluster().tls().expect("TLS").ca_file())
    )
}

/// `sslrootcert=` a CA unrelated to the server.
fn wrong_ca(db: &TestDb) -> String {
    format!(
        "sslrootcert={}",
        encoded(db.cluster().tls().expect("TLS").other_ca_file())
    )
}

/// Opens (and migrates) the store at `url` with the default settings.
async fn open(url: &str) -> Result<Db, StoreError> {
    Db::open(url, &StoreSettings::default()).await
}

/// Asserts opening `url` fails as unavailable, saying `expected`, without
/// the URL (it may hold a password) or the client's types and crates.
async fn assert_refused(url: &str, expected: &str) {
    let err = match open(url).await {
        Ok(_) => panic!("{url} opened"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(text.contains(expected), "expected {expected:?} in: {text}");
    for internal in [url, "rustls", "webpki", "Error {", "Io("] {
        assert!(!text.contains(internal), "{internal:?} in: {text}");
    }
}

/// The library's sessions (`application_name` idemkey), split by TLS.
fn sessions(db: &TestDb) -> (u64, u64) {
    let count = |ssl: bool| -> u64 {
        db.sql(&format!(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE application_name = 'idemkey' AND ssl = {ssl}"
        ))
        .parse()
        .expect("a count")
    };
    (count(true), count(false))
}

/// The library's records table exists.
fn migrated(db: &TestDb) -> bool {
    db.sql("SELECT to_regclass('idempotency_records') IS NOT NULL") == "t"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_right_ca_opens_and_migrates_over_tls() {
    let db = tls_db();
    let url = url(
        &db,
        SERVER_NAME,
        &format!("sslmode=verify-full&{}", right_ca(&db)),
    );
    let store = open(&url).await.expect("verify-full");
    store.ping().await.expect("ping");
    assert!(migrated(&db));
    let (tls, plain) = sessions(&db);
    assert!(
        tls > 0 && plain == 0,
        "TLS sessions {tls}, plaintext {plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_with_a_clear_error() {
    let db = tls_db();
    for mode in ["verify-full", "verify-ca", "require"] {
        // libpq: `require` with a root certificate checks the chain.
        let bad = url(
            &db,
            SERVER_NAME,
            &format!("sslmode={mode}&{}", wrong_ca(&db)),
        );
        assert_refused(
            &bad,
            "TLS to PostgreSQL failed: the server's certificate is not signed by a CA in sslrootcert",
        )
        .await;
    }
    assert!(!migrated(&db));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_host_name_fails_under_verify_full_and_passes_under_verify_ca() {
    let db = tls_db();
    // The certificate names `localhost` only.
    let full = url(
        &db,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", right_ca(&db)),
    );
    assert_refused(
        &full,
        "the server's certificate does not name the host in the URL",
    )
    .await;
    assert!(!migrated(&db));
    // The key=value form, with a quoted path.
    let ca = db.cluster().tls().expect("TLS").ca_file();
    let ca_only = format!(
        "host=127.0.0.1 port={} user=postgres dbname={} sslmode=verify-ca sslrootcert='{}'",
        db.cluster().port(),
        db.db,
        ca.display()
    );
    open(&ca_only).await.expect("verify-ca");
    assert!(migrated(&db));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_refuses_sslmode_disable() {
    let db = tls_db();
    assert_refused(
        &url(&db, SERVER_NAME, "sslmode=disable"),
        "no pg_hba.conf entry",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_checking_the_certificate() {
    let db = tls_db();
    // 127.0.0.1 is not in the certificate, and no root is given: require
    // checks neither.
    let store = open(&url(&db, "127.0.0.1", "sslmode=require"))
        .await
        .expect("require");
    store.ping().await.expect("ping");
    let (tls, plain) = sessions(&db);
    assert!(
        tls > 0 && plain == 0,
        "TLS sessions {tls}, plaintext {plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_prefer_uses_tls_when_the_server_offers_it() {
    let db = tls_db();
    // No sslmode: libpq's `prefer`. Only a TLS session gets in here.
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{}",
        db.cluster().port(),
        db.db
    );
    open(&url).await.expect("prefer");
    assert!(migrated(&db));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_stricter_never_fall_back_to_plaintext() {
    let mut db = tls_db();
    // The server stops offering TLS; its pg_hba.conf still wants it.
    db.cluster_mut().set_setting("ssl", "off").expect("ssl off");
    for params in [
        "sslmode=require".to_owned(),
        format!("sslmode=verify-ca&{}", right_ca(&db)),
        format!("sslmode=verify-full&{}", right_ca(&db)),
    ] {
        assert_refused(
            &url(&db, SERVER_NAME, &params),
            "server does not support TLS",
        )
        .await;
    }
    // `prefer` does fall back, and the server's rules then refuse it.
    assert_refused(
        &url(&db, SERVER_NAME, "sslmode=prefer"),
        "no pg_hba.conf entry",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_roots_do_not_trust_a_private_ca() {
    let db = tls_db();
    let system = url(&db, SERVER_NAME, "sslrootcert=system");
    let err = open(&system).await.expect_err("a private CA").to_string();
    assert!(
        err.contains("not signed by a CA in sslrootcert") || err.contains("no trusted roots found"),
        "{err}"
    );
    assert_refused(
        &format!("{system}&sslmode=require"),
        "sslmode=require may not be used with sslrootcert=system",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_login_is_bound_to_the_tls_channel() {
    let mut db = tls_db();
    db.sql(&format!(
        "SET password_encryption = 'scram-sha-256';\n\
         CREATE ROLE app LOGIN PASSWORD 'pw-1';\n\
         ALTER DATABASE {} OWNER TO app;",
        db.db
    ));
    let hba = db.cluster().data_dir().join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    std::fs::write(
        &hba,
        format!("hostssl all app 127.0.0.1/32 scram-sha-256\n{rules}"),
    )
    .expect("write pg_hba.conf");
    // Reloads the configuration (pg_hba.conf with it) and waits for it.
    db.cluster_mut()
        .set_setting("password_encryption", "scram-sha-256")
        .expect("reload");
    let login = |password: &str| {
        format!(
            "postgres://app:{password}@{SERVER_NAME}:{}/{}?sslmode=verify-full&{}&channel_binding=require",
            db.cluster().port(),
            db.db,
            right_ca(&db)
        )
    };
    // SCRAM-SHA-256-PLUS: the password proof covers the server's certificate.
    open(&login("pw-1")).await.expect("the right password");
    assert_eq!(
        db.sql("SELECT tableowner FROM pg_tables WHERE tablename = 'idempotency_records'"),
        "app"
    );
    assert_refused(&login("pw-2"), "password authentication failed").await;
}
