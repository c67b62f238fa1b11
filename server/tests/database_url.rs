//! `DATABASE_URL` is read as libpq reads it: the user's `options` (here a
//! `search_path`, so idemkey lives in a schema of its own) are kept, and
//! the server's own session settings are added after them.

use std::process::Command;
use std::time::Duration;

use idemkey::store::postgres::PgDb;
use idemkey_server::db::{Db, PgSettings};

mod common;
use common::{BIN, BODY, Backend, Env, new_key};

const SCHEMA: &str = "idemkey_app";

/// A fresh database with an empty schema `idemkey_app`.
fn env_with_schema() -> Env {
    let env = Env::new(Backend::Postgres);
    env.sql(&format!("CREATE SCHEMA {SCHEMA}"));
    env
}

/// Where the migrations put `orders`: the schemas holding such a table.
fn schemas_of_orders(env: &Env) -> String {
    env.sql(
        "SELECT string_agg(table_schema, ',') FROM information_schema.tables \
         WHERE table_name = 'orders'",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_search_path_is_kept_by_migrate_and_serve() {
    let mut env = env_with_schema();
    env.url = format!("{}?options=-c%20search_path%3D{SCHEMA}", env.url);
    let out = Command::new(BIN)
        .args(["migrate", "--database-url", &env.url])
        .env_remove("DATABASE_URL")
        .output()
        .expect("run migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(schemas_of_orders(&env), SCHEMA);
    let token = env.account("schema");
    let server = env.serve(&[]);
    let reply = server.post_order(&token, &new_key(), BODY).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(env.count(&format!("{SCHEMA}.orders")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_session_settings_are_added_to_the_users_options() {
    let env = env_with_schema();
    let settings = PgSettings {
        lock_timeout: Duration::from_millis(1234),
        statement_timeout: Duration::from_millis(4321),
        ..PgSettings::default()
    };
    // The key=value form, with the options quoted.
    let cluster = env.cluster();
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname={} options='-c search_path={SCHEMA} -c work_mem=8MB'",
        cluster.port(),
        env.db
    );
    let Db::Postgres(db) = Db::open(&conninfo, &settings).await.expect("open") else {
        panic!("a key=value string opens PostgreSQL");
    };
    assert_eq!(schemas_of_orders(&env), SCHEMA);
    let names = [
        "search_path",
        "work_mem",
        "lock_timeout",
        "statement_timeout",
    ];
    assert_eq!(show(&db, &names).await, [SCHEMA, "8MB", "1234ms", "4321ms"]);
}

async fn show(db: &PgDb, names: &[&str]) -> Vec<String> {
    let client = db.pool().get().await.expect("a connection");
    let mut values = Vec::new();
    for name in names {
        let row = client
            .query_one(&format!("SHOW {name}"), &[])
            .await
            .expect("SHOW");
        values.push(row.get::<_, String>(0));
    }
    values
}
