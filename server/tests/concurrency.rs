//! Many concurrent sends of one key, spread over two server processes on
//! one database: exactly one order; every 201 identical; the rest 409
//! problems with Retry-After.

#[macro_use]
mod common;

use common::{BODY, Backend, Env, Reply, Server, new_key};

async fn send_concurrently(servers: &[&Server], token: &str, key: &str, n: usize) -> Vec<Reply> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let server = servers[i % servers.len()];
        let request = server
            .client
            .post(format!("{}/orders", server.base))
            .header("authorization", format!("Bearer {token}"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(BODY);
        tasks.spawn(async move { Reply::from(request.send().await.expect("send")).await });
    }
    tasks.join_all().await
}

async fn one_key_sent_concurrently_creates_one_order(backend: Backend, n: usize) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let (a, b) = (env.serve(&[]), env.serve(&[]));
    let key = new_key();
    let replies = send_concurrently(&[&a, &b], &token, &key, n).await;
    let created: Vec<_> = replies.iter().filter(|r| r.status == 201).collect();
    assert!(!created.is_empty(), "at least one 201");
    for reply in &replies {
        match reply.status {
            201 => {
                assert_eq!(reply.body, created[0].body, "every 201 is identical");
                assert_eq!(reply.header("location"), created[0].header("location"));
            }
            409 => {
                reply.assert_problem(409, "idempotency-request-in-progress");
                assert!(reply.header("retry-after").is_some());
            }
            other => panic!("unexpected {other}: {}", reply.body),
        }
    }
    let fresh = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(fresh, 1, "exactly one request executed");
    assert_eq!(env.counts(), (1, 1), "exactly one order");
    eprintln!(
        "{n} concurrent sends: {} x 201 (1 new, {} replayed), {} x 409",
        created.len(),
        created.len() - 1,
        replies.len() - created.len()
    );
}

async fn ten_concurrent_sends_over_two_processes_create_one_order(backend: Backend) {
    one_key_sent_concurrently_creates_one_order(backend, 10).await;
}

async fn two_hundred_concurrent_sends_over_two_processes_create_one_order(backend: Backend) {
    one_key_sent_concurrently_creates_one_order(backend, 200).await;
}

/// Two processes starting at once on an empty database migrate it once.
async fn two_processes_starting_at_once_migrate_once(backend: Backend) {
    let env = Env::new(backend);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| env.serve(&[]));
        let b = s.spawn(|| env.serve(&[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(
        env.sql("SELECT count(*) FROM schema_migrations WHERE version = 1"),
        "1"
    );
    let token = env.account("shop");
    let key = new_key();
    assert_eq!(a.post_order(&token, &key, BODY).await.status, 201);
    assert_eq!(b.post_order(&token, &key, BODY).await.status, 201);
    assert_eq!(env.counts(), (1, 1));
}

on_each_backend!(
    ten_concurrent_sends_over_two_processes_create_one_order,
    two_hundred_concurrent_sends_over_two_processes_create_one_order,
    two_processes_starting_at_once_migrate_once,
);
