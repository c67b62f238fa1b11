//! Counts the database round trips of a new order and of a replay, from
//! the statements PostgreSQL logs with `log_statement = all`. The article's
//! lab spends 7 per new order (BEGIN, 2 SET LOCAL, INSERT claim, INSERT
//! order, UPDATE result, COMMIT).

mod common;

use std::time::Duration;

use common::{BODY, Backend, Env, new_key};
use idemkey_testkit::PgOptions;

/// Statements the server sent while `f` ran.
async fn statements_during<F: std::future::Future<Output = ()>>(env: &Env, f: F) -> Vec<String> {
    let log = env.cluster().log_file().to_owned();
    let before = std::fs::read_to_string(&log).unwrap().len();
    f.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = std::fs::read_to_string(&log).unwrap();
    text[before..]
        .lines()
        .filter(|l| l.contains("LOG:  execute") || l.contains("LOG:  statement:"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_order_and_a_replay_each_cost_one_round_trip() {
    let env = Env::with_own_cluster(
        Backend::Postgres,
        PgOptions::new().setting("log_statement", "all"),
    );
    let token = env.account("shop");
    let server = env.serve(&["--pool-size", "1"]);
    // Warm up: the connection is opened and the statements are prepared
    // once per connection (each preparation is one more round trip, paid
    // once per connection, not per request).
    let warm = new_key();
    assert_eq!(server.post_order(&token, &warm, BODY).await.status, 201);
    assert_eq!(server.post_order(&token, &warm, BODY).await.status, 201);

    let key = new_key();
    let new_order = statements_during(&env, async {
        assert_eq!(server.post_order(&token, &key, BODY).await.status, 201);
    })
    .await;
    let replay = statements_during(&env, async {
        let r = server.post_order(&token, &key, BODY).await;
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
    })
    .await;
    eprintln!(
        "round trips: new order {} {:?}; replay {} {:?}",
        new_order.len(),
        new_order,
        replay.len(),
        replay
    );
    assert_eq!(new_order.len(), 1, "{new_order:#?}");
    assert_eq!(replay.len(), 1, "{replay:#?}");
}
