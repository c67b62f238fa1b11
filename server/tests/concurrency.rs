//! Many concurrent sends of one key, spread over two server processes on
//! one database: exactly one order; every 201 identical; the rest 409
//! problems with Retry-After. The race is forced, not hoped for: every send
//! asks for the `hold-before-commit` fault, which keeps the new order's
//! transaction open before its commit, and the created answer's
//! `x-idemkey-test-overlap` says how many other requests its process was
//! serving at that moment (at least one, or the test tested no race).

#[macro_use]
mod common;

use common::{BODY, Backend, Env, Reply, Server, eventually, new_key};

async fn send_concurrently(servers: &[&Server], token: &str, key: &str, n: usize) -> Vec<Reply> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let server = servers[i % servers.len()];
        let request = server
            .order_request(token, key, BODY)
            .header("x-idemkey-test-fault", "hold-before-commit");
        tasks.spawn(async move { Reply::from(request.send().await.expect("send")).await });
    }
    tasks.join_all().await
}

async fn one_key_sent_concurrently_creates_one_order(backend: Backend, n: usize) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let (a, b) = (env.serve_with_faults(&[]), env.serve_with_faults(&[]));
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
    let fresh: Vec<_> = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(fresh.len(), 1, "exactly one request executed");
    let overlap: u64 = fresh[0]
        .header("x-idemkey-test-overlap")
        .expect("the executing request was held before its commit")
        .parse()
        .unwrap();
    assert!(
        overlap >= 1,
        "no other request was in flight while the order was uncommitted"
    );
    assert_eq!(env.counts(), (1, 1), "exactly one order");
    eprintln!(
        "{n} concurrent sends: {} x 201 (1 new, {} replayed), {} x 409; \
         {overlap} others in flight in the creating process before its commit",
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
    // Each process logs every migration it applies: one applied them all,
    // once each, and the other found nothing to do.
    let applied = |s: &Server| {
        s.log()
            .lines()
            .filter(|l| l.contains("applied") && l.contains("migration"))
            .count()
    };
    let recorded: usize = env
        .sql("SELECT count(*) FROM idemkey_migrations")
        .parse()
        .unwrap();
    assert!(recorded >= 1, "no migration recorded");
    // Informational lines reach the log within the server's flush interval.
    eventually("a line per recorded migration", async || {
        applied(&a) + applied(&b) >= recorded
    })
    .await;
    let (by_a, by_b) = (applied(&a), applied(&b));
    assert_eq!(by_a + by_b, recorded, "each migration applied once");
    assert!(
        by_a == 0 || by_b == 0,
        "both processes applied migrations: {by_a} and {by_b}"
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
