//! SQLite's group commit through a real server: 200 concurrent new orders
//! share transactions, and one of them that fails to store its result
//! stores nothing while the others commit. (A `kill -9` in the middle of a
//! batch is the fault suite's `sqlite-kill` scenario.)

mod common;

use common::{BODY, Backend, Env, Reply, new_key};

/// A counter of the server's `/metrics`.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing in\n{metrics}"))
        .parse()
        .expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_order_leaves_its_batch_mates_committed() {
    const SENDS: usize = 200;
    const FAULTY: usize = 100;
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let server = env.serve_with_faults(&[]);
    let keys: Vec<String> = (0..SENDS).map(|_| new_key()).collect();
    let mut sends = tokio::task::JoinSet::new();
    for (i, key) in keys.iter().enumerate() {
        let mut request = server.order_request(&token, key, BODY);
        if i == FAULTY {
            request = request.header("x-idemkey-test-fault", "fail-storing-result");
        }
        sends.spawn(async move { (i, Reply::from(request.send().await.expect("send")).await) });
    }
    let mut replies = vec![None; SENDS];
    while let Some(done) = sends.join_next().await {
        let (i, reply) = done.expect("a send task");
        replies[i] = Some(reply);
    }
    for (i, reply) in replies.iter().enumerate() {
        let reply = reply.as_ref().expect("every send answered");
        if i == FAULTY {
            reply.assert_problem(503, "service-unavailable");
        } else {
            assert_eq!(reply.status, 201, "order {i}: {}", reply.body);
        }
    }
    assert_eq!(
        env.counts(),
        (SENDS as u64 - 1, SENDS as u64 - 1),
        "every order but the faulty one, each with its key"
    );
    let faulty = keys[FAULTY].trim_matches('"');
    let lookup = server.get(&token, &format!("/operations/{faulty}")).await;
    assert_eq!(lookup.status, 200, "{}", lookup.body);
    assert_eq!(lookup.json()["state"], "unknown", "nothing stored");

    let metrics = server.metrics().await;
    let batches = counter(&metrics, "idemkey_sqlite_order_batches_total");
    let orders = counter(&metrics, "idemkey_sqlite_batched_orders_total");
    assert!(orders >= SENDS as u64 - 1, "{orders} orders in batches");
    assert!(
        batches < orders,
        "{batches} batches for {orders} orders: some transaction carried several"
    );
}
