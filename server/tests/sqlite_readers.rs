//! SQLite's read-only connections through real servers: order reads, key
//! lookups and `/metrics`' outbox figures answer while the file's write lock is held and a new order
//! waits for it, and an acknowledged order is visible
//! at once through a reader, in the process that wrote it and in another
//! one on the same file.

mod common;

use common::{BODY, Backend, Env, Reply, Server, eventually, new_key};

/// A gauge of the server's `/metrics` for the SQLite store.
async fn pool_gauge(server: &Server, name: &str) -> u64 {
    let metrics = server.metrics().await;
    let line = format!("{name}{{backend=\"sqlite\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("{name} missing in\n{metrics}"))
        .parse()
        .expect("a gauge")
}

/// A new order's id, asserting it was created.
fn created(reply: &Reply) -> String {
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().expect("an id").to_owned()
}

/// Another process (this test) holds the file's write lock until dropped.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(env: &Env) -> Self {
        let conn = rusqlite::Connection::open(&env.db).expect("open the file");
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("the write lock");
        Self(conn)
    }

    fn release(self) {
        self.0.execute_batch("ROLLBACK").expect("release");
    }
}

/// Read-only connections of the first test's server (with 0 it fails: the
/// reads wait for the writer, which waits for the lock).
const READERS: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_answer_while_a_new_order_waits_for_the_write_lock() {
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    // A long wait: the new order must still be waiting when the reads
    // answer.
    let server = env.serve(&[
        "--sqlite-readers",
        &READERS.to_string(),
        "--pool-wait",
        "30s",
    ]);
    let key = new_key();
    let id = created(&server.post_order(&token, &key, BODY).await);
    // The 201 can reach the client before the writer's connection is back
    // in the gauge: wait for the idle state, bounded.
    eventually("the writer and the readers are idle", async || {
        pool_gauge(&server, "idemkey_pool_available").await == 1 + READERS
    })
    .await;

    let lock = WriteLock::take(&env);
    let waiting = {
        let request = server.order_request(&token, &new_key(), BODY);
        tokio::spawn(async move { Reply::from(request.send().await.expect("send")).await })
    };
    // The writer has taken the new order and waits for the file's lock.
    eventually("the writer waits for the write lock", async || {
        pool_gauge(&server, "idemkey_pool_available").await == READERS
    })
    .await;

    let order = server.get(&token, &format!("/orders/{id}")).await;
    assert_eq!(order.status, 200, "{}", order.body);
    assert_eq!(order.json()["id"], id.as_str());
    let list = server.get(&token, "/orders").await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(list.json()["orders"][0]["id"], id.as_str());
    let lookup = server
        .get(&token, &format!("/operations/{}", key.trim_matches('"')))
        .await;
    assert_eq!(lookup.status, 200, "{}", lookup.body);
    assert_eq!(lookup.json()["state"], "completed");
    // The outbox's figures, which a scrape leaves out when the store does
    // not answer in time.
    let metrics = server.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("idemkey_outbox_pending ")),
        "{metrics}"
    );

    assert!(!waiting.is_finished(), "the new order still waits");
    assert_eq!(
        pool_gauge(&server, "idemkey_pool_available").await,
        READERS,
        "the writer still holds the new order"
    );
    lock.release();
    let new = created(&waiting.await.expect("the new order's task"));
    let shown = server.get(&token, &format!("/orders/{new}")).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_order_is_read_at_once_in_either_process() {
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let servers = [
        env.serve(&["--sqlite-readers", "2"]),
        env.serve(&["--sqlite-readers", "2"]),
    ];
    // Every order is read back through the readers of both processes right
    // after its 201; a reader that kept a snapshot from an earlier call
    // would miss it.
    for i in 0..40 {
        let writer = &servers[i % 2];
        let id = created(&writer.post_order(&token, &new_key(), BODY).await);
        for (n, server) in servers.iter().enumerate() {
            let order = server.get(&token, &format!("/orders/{id}")).await;
            assert_eq!(
                order.status, 200,
                "order {i} in process {n}: {}",
                order.body
            );
            assert_eq!(order.json()["id"], id.as_str());
            let list = server.get(&token, "/orders?limit=1").await;
            assert_eq!(list.json()["orders"][0]["id"], id.as_str(), "order {i}");
        }
    }
}
