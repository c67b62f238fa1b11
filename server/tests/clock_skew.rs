//! Servers whose clocks disagree share one PostgreSQL database: every
//! lease and window is decided at the database's clock, so a server whose
//! own clock runs hours ahead neither re-executes a key inside its window
//! nor takes over a live claim (see also `layer.rs`, fixture processes).
//!
//! SQLite has no such case: every process on the host reads the one OS
//! clock, through SQLite itself, so the store's clock and each server's are
//! the same clock.

mod common;
use common::{BODY, Backend, Env, new_key};

/// Under `reexecute` with a one-hour window, a retry sent to a server whose
/// clock is two hours ahead is replayed: one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_a_skewed_clock_never_reexecutes_inside_the_window() {
    let env = Env::new(Backend::Postgres);
    let token = env.account("shop");
    let flags = ["--expiry-policy", "reexecute", "--replay-ttl", "1h"];
    let on_time = env.serve(&flags);
    // Started only once its own `Date` header is two hours ahead.
    let ahead = env.serve_skewed(&flags, "+2h");
    // The check tells a skewed server from one on time.
    let on_time_base = on_time.base.clone();
    let check = tokio::task::spawn_blocking(move || {
        idemkey_testkit::check_clock_skew(&on_time_base, "+2h")
    });
    let why = check.await.expect("join").expect_err("a server on time");
    assert!(why.contains("did not take effect"), "{why}");
    let key = new_key();
    let first = on_time.post_order(&token, &key, BODY).await;
    assert_eq!(first.status, 201);
    let retry = ahead.post_order(&token, &key, BODY).await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body, "the stored order, not a new one");
    assert_eq!(env.counts(), (1, 1));
    // The skewed server is really skewed: the lookup it answers still says
    // completed, from the database's clock.
    let bare = key.trim_matches('"');
    let lookup = ahead.get(&token, &format!("/operations/{bare}")).await;
    assert!(
        lookup.body.contains(r#""state":"completed""#),
        "{}",
        lookup.body
    );
}
