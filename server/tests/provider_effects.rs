//! The payment provider simulator's confirmations (a mail sink) and refunds,
//! the two downstream effects a purchase has besides its charge, on a real
//! process over a real PostgreSQL database and a real SQLite file: each is
//! deduplicated by its key exactly as a charge is, a charge is refunded
//! once, `POST /faults/lose-next?endpoint=` loses the answer of one
//! endpoint's effect after it committed, and [`ProviderClient`]'s
//! classification of each outcome ([`Effect`]) matches what the process
//! did.

#[macro_use]
mod common;

use std::time::Duration;

use common::{Backend, Env, Reply, Server, new_key};
use idemkey_provider_sim::scope_of;
use idemkey_provider_sim::store::{
    ConfirmationWrite, Db, Endpoint, NewCharge, NewConfirmation, NewRefund, RefundWrite,
};
use idemkey_server::payments::client::{
    Attempt, Effect, FoundConfirmation, FoundRefund, ProviderClient,
};
use uuid::Uuid;

const SECRET_A: &str = "provider-secret-a";
const SECRET_B: &str = "provider-secret-b";
const RECIPIENT: &str = "ana@example.com";

/// A provider on `env`'s database knowing both secrets, with extra flags.
fn provider(env: &Env, extra: &[&str]) -> Server {
    let mut args = vec![
        "--database-url",
        env.url.as_str(),
        "--token",
        SECRET_A,
        "--token",
        SECRET_B,
    ];
    args.extend_from_slice(extra);
    Server::provider(&args)
}

fn client(server: &Server, secret: &str) -> ProviderClient {
    ProviderClient::new(&server.base, secret, Duration::from_secs(10)).expect("a client")
}

/// A key's characters (what the client takes).
fn key() -> String {
    new_key().trim_matches('"').to_owned()
}

/// `POST {path}` of `body` under `key`, by hand.
async fn post(server: &Server, secret: &str, path: &str, key: &str, body: &str) -> Reply {
    let response = server
        .client
        .post(format!("{}{path}", server.base))
        .header("authorization", format!("Bearer {secret}"))
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("send");
    Reply::from(response).await
}

/// The ids listed by `GET /{collection}`, oldest first.
async fn listed(server: &Server, secret: &str, collection: &str) -> Vec<String> {
    let list = server.get(secret, &format!("/{collection}")).await;
    assert_eq!(list.status, 200, "{}", list.body);
    list.json()[collection]
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// `(kind, effect, key)` of each row of `GET /requests{query}`.
async fn logged(server: &Server, secret: &str, query: &str) -> Vec<(String, String, String)> {
    let log = server.get(secret, &format!("/requests{query}")).await;
    assert_eq!(log.status, 200, "{}", log.body);
    log.json()["requests"]
        .as_array()
        .expect("a log")
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().expect(k).to_owned();
            (text("kind"), text("effect"), text("idempotency_key"))
        })
        .collect()
}

/// `(kind, key)` pairs, to compare with [`logged`] rows of one effect.
fn rows(effect: &str, rows: &[(&str, &str)]) -> Vec<(String, String, String)> {
    rows.iter()
        .map(|(kind, key)| ((*kind).to_owned(), effect.to_owned(), (*key).to_owned()))
        .collect()
}

fn delivered<T: std::fmt::Debug>(effect: Effect<T>) -> T {
    match effect {
        Effect::Delivered(found) => found,
        other => panic!("expected a delivered effect, got {other:?}"),
    }
}

fn refused_with<T: std::fmt::Debug>(effect: Effect<T>, expected: &str) {
    match effect {
        Effect::Refused { code, reason } => {
            assert_eq!(code.as_deref(), Some(expected), "{reason}");
            assert!(reason.starts_with(expected), "{reason}");
        }
        other => panic!("expected a refusal {expected}, got {other:?}"),
    }
}

fn uncertain<T: std::fmt::Debug>(effect: Effect<T>) {
    match effect {
        Effect::Uncertain { reason } => {
            assert!(reason.starts_with("connection lost"), "{reason}");
        }
        other => panic!("expected an uncertain outcome, got {other:?}"),
    }
}

/// A charge of A's, made through the client: its id.
async fn charge(a: &ProviderClient, amount: i64) -> String {
    match a.charge(&key(), Uuid::new_v4(), amount, "EUR").await {
        Attempt::Charged(found) => found.charge_id,
        other => panic!("expected a charge, got {other:?}"),
    }
}

fn confirmation_body(order: Uuid, text: &str) -> String {
    serde_json::json!({"order_id": order.to_string(), "recipient": RECIPIENT, "text": text})
        .to_string()
}

async fn a_key_sends_one_confirmation_and_replays_it(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let (k, order) = (key(), Uuid::new_v4());
    let first = delivered(a.confirm(&k, order, RECIPIENT, "Thank you").await);
    assert!(first.confirmation_id.starts_with("cf_"), "{first:?}");
    assert!(first.is_for(order, RECIPIENT));
    assert_eq!(first.text.as_deref(), Some("Thank you"));
    // The same key and body: the same confirmation, replayed as a charge is
    // (201, Idempotent-Replayed), at the Location it names.
    assert_eq!(
        delivered(a.confirm(&k, order, RECIPIENT, "Thank you").await),
        first
    );
    let replay = post(
        &server,
        SECRET_A,
        "/confirmations",
        &k,
        &confirmation_body(order, "Thank you"),
    )
    .await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        replay.header("location"),
        Some(format!("/confirmations/{}", k.replace('-', "%2D")).as_str())
    );
    assert_eq!(replay.json()["id"], first.confirmation_id.as_str());
    // Another body under the key: refused, nothing sent.
    post(
        &server,
        SECRET_A,
        "/confirmations",
        &k,
        &confirmation_body(order, "Thanks again"),
    )
    .await
    .assert_problem(422, "idempotency-key-reused");
    refused_with(
        a.confirm(&k, order, "bob@example.com", "Thank you").await,
        "idempotency-key-reused",
    );
    // A body that is not a confirmation, and no key.
    let bad = post(
        &server,
        SECRET_A,
        "/confirmations",
        &key(),
        r#"{"order_id":"x","recipient":"","text":""}"#,
    )
    .await;
    bad.assert_problem(400, "request-invalid");
    assert_eq!(bad.json()["errors"].as_array().map(Vec::len), Some(3));
    let keyless = server
        .client
        .post(format!("{}/confirmations", server.base))
        .header("authorization", format!("Bearer {SECRET_A}"))
        .header("content-type", "application/json")
        .body(confirmation_body(order, "t"))
        .send()
        .await
        .expect("send");
    Reply::from(keyless)
        .await
        .assert_problem(400, "idempotency-key-missing");
    // Looked up and listed; an unknown key is not found.
    let found = server.get(SECRET_A, &format!("/confirmations/{k}")).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let json = found.json();
    assert_eq!(
        (
            json["id"].as_str(),
            json["idempotency_key"].as_str(),
            json["order_id"].as_str(),
            json["recipient"].as_str(),
            json["text"].as_str(),
        ),
        (
            Some(first.confirmation_id.as_str()),
            Some(k.as_str()),
            Some(order.to_string().as_str()),
            Some(RECIPIENT),
            Some("Thank you"),
        )
    );
    assert!(
        json["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(delivered(a.lookup_confirmation(&k).await), first);
    assert_eq!(a.lookup_confirmation(&key()).await, Effect::NotFound);
    server
        .get(SECRET_A, &format!("/confirmations/{}", key()))
        .await
        .assert_problem(404, "not-found");
    assert_eq!(
        listed(&server, SECRET_A, "confirmations").await,
        std::slice::from_ref(&first.confirmation_id)
    );
    assert_eq!(env.count("provider_confirmations"), 1);
    // The same key is B's own: B neither sees nor replays A's.
    let b = client(&server, SECRET_B);
    assert_eq!(b.lookup_confirmation(&k).await, Effect::NotFound);
    assert!(listed(&server, SECRET_B, "confirmations").await.is_empty());
    let theirs = delivered(b.confirm(&k, Uuid::new_v4(), "bob@example.com", "Hi").await);
    assert_ne!(theirs.confirmation_id, first.confirmation_id);
    assert_eq!(env.count("provider_confirmations"), 2);
    // And a key of a confirmation is not a charge's.
    assert_eq!(a.lookup(&k).await, Attempt::NotFound);
    // The log: every request and lookup, one run of the handler (the
    // replays run none), under the confirmations only.
    let log = logged(&server, SECRET_A, "?effect=confirmations").await;
    let of_k: Vec<_> = log.iter().filter(|r| r.2 == k).cloned().collect();
    assert_eq!(
        of_k,
        rows(
            "confirmations",
            &[
                ("request", &k),
                ("confirmation", &k),
                ("request", &k),
                ("request", &k),
                ("request", &k),
                ("request", &k),
                ("lookup", &k),
                ("lookup", &k),
            ]
        ),
        "{log:?}"
    );
    // The default log is the charges' (the one lookup of `k` as a charge).
    assert_eq!(
        logged(&server, SECRET_A, "").await,
        rows("charges", &[("lookup", &k)])
    );
    let all = logged(&server, SECRET_A, "?effect=all").await;
    assert_eq!(all.len(), log.len() + 1);
    server
        .get(SECRET_A, "/requests?effect=payments")
        .await
        .assert_problem(400, "request-invalid");
}

async fn a_charge_is_refunded_once(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let (a, b) = (client(&server, SECRET_A), client(&server, SECRET_B));
    let charged = charge(&a, 5980).await;
    let k = key();
    let refund = delivered(a.refund(&k, &charged, 5980).await);
    assert!(refund.refund_id.starts_with("re_"), "{refund:?}");
    assert!(refund.is_for(&charged, 5980));
    assert_eq!(refund.currency.as_deref(), Some("EUR"));
    // The same key again: the same refund (replayed by the layer).
    assert_eq!(delivered(a.refund(&k, &charged, 5980).await), refund);
    let body = |charge: &str, amount: i64| {
        serde_json::json!({"charge_id": charge, "amount_cents": amount}).to_string()
    };
    let replay = post(&server, SECRET_A, "/refunds", &k, &body(&charged, 5980)).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json()["id"], refund.refund_id.as_str());
    // Another body under the key: the layer refuses it.
    post(&server, SECRET_A, "/refunds", &k, &body(&charged, 5981))
        .await
        .assert_problem(422, "idempotency-key-reused");
    // Another key for the refunded charge: 409, final, naming the refund;
    // the same key again gets the same answer, and no refund is under it.
    let other = key();
    let conflict = post(&server, SECRET_A, "/refunds", &other, &body(&charged, 5980)).await;
    conflict.assert_problem(409, "charge-already-refunded");
    assert_eq!(conflict.json()["refund"], refund.refund_id.as_str());
    assert_eq!(
        conflict.header("content-type"),
        Some("application/problem+json")
    );
    refused_with(
        a.refund(&other, &charged, 5980).await,
        "charge-already-refunded",
    );
    refused_with(
        a.refund(&key(), &charged, 5980).await,
        "charge-already-refunded",
    );
    assert_eq!(a.lookup_refund(&other).await, Effect::NotFound);
    // An unknown charge, another scope's charge, another amount: refused
    // for good, nothing stored.
    let unknown = format!("ch_{}", Uuid::new_v4().simple());
    post(&server, SECRET_A, "/refunds", &key(), &body(&unknown, 5980))
        .await
        .assert_problem(404, "charge-not-found");
    refused_with(a.refund(&key(), &unknown, 5980).await, "charge-not-found");
    refused_with(b.refund(&key(), &charged, 5980).await, "charge-not-found");
    let second = charge(&a, 1090).await;
    let mismatch = post(&server, SECRET_A, "/refunds", &key(), &body(&second, 1000)).await;
    mismatch.assert_problem(422, "refund-amount-mismatch");
    assert_eq!(mismatch.json()["charge_amount_cents"], 1090);
    refused_with(
        a.refund(&key(), &second, 1091).await,
        "refund-amount-mismatch",
    );
    post(
        &server,
        SECRET_A,
        "/refunds",
        &key(),
        r#"{"charge_id":"ch_x"}"#,
    )
    .await
    .assert_problem(400, "request-invalid");
    // The second charge is still refundable, once.
    let again = delivered(a.refund(&key(), &second, 1090).await);
    assert!(again.is_for(&second, 1090));
    // Looked up and listed.
    let found = server.get(SECRET_A, &format!("/refunds/{k}")).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let json = found.json();
    assert_eq!(
        (
            json["id"].as_str(),
            json["idempotency_key"].as_str(),
            json["charge_id"].as_str(),
            json["amount_cents"].as_i64(),
        ),
        (
            Some(refund.refund_id.as_str()),
            Some(k.as_str()),
            Some(charged.as_str()),
            Some(5980),
        )
    );
    assert_eq!(delivered(a.lookup_refund(&k).await), refund);
    assert_eq!(b.lookup_refund(&k).await, Effect::NotFound);
    assert_eq!(
        listed(&server, SECRET_A, "refunds").await,
        [refund.refund_id.clone(), again.refund_id.clone()]
    );
    assert!(listed(&server, SECRET_B, "refunds").await.is_empty());
    assert_eq!(env.count("provider_refunds"), 2);
    // The log shows each run that reached a refund, the refused second
    // refund of the first charge included (with that charge's order).
    let log = logged(&server, SECRET_A, "?effect=refunds").await;
    let runs = log.iter().filter(|r| r.0 == "refund").count();
    assert_eq!(runs, 4, "{log:?}");
}

async fn lose_next_loses_one_endpoints_answer_after_its_effect(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let arm = async |query: &str| {
        let response = server
            .client
            .post(format!("{}/faults/lose-next{query}", server.base))
            .header("authorization", format!("Bearer {SECRET_B}"))
            .send()
            .await
            .expect("send");
        Reply::from(response).await
    };
    arm("?endpoint=payments")
        .await
        .assert_problem(400, "request-invalid");

    // Armed for confirmations: a charge passes, the confirmation commits and
    // loses its answer; the lookup finds it and nothing is sent again.
    assert_eq!(arm("?endpoint=confirmations").await.status, 204);
    let charged = charge(&a, 5980).await;
    let (k, order) = (key(), Uuid::new_v4());
    uncertain(a.confirm(&k, order, RECIPIENT, "Thank you").await);
    let sent = a.confirm(&k, order, RECIPIENT, "Thank you");
    let found = delivered(a.lookup_confirmation(&k).await.or_send(sent).await);
    assert!(found.is_for(order, RECIPIENT));
    assert_eq!(
        listed(&server, SECRET_A, "confirmations").await,
        std::slice::from_ref(&found.confirmation_id)
    );
    assert_eq!(
        logged(&server, SECRET_A, "?effect=confirmations").await,
        rows(
            "confirmations",
            &[("request", &k), ("confirmation", &k), ("lookup", &k)]
        ),
        "the lookup found it: not sent again"
    );
    // One shot: the next confirmation is answered.
    delivered(a.confirm(&key(), order, RECIPIENT, "Again").await);

    // Armed for refunds: a confirmation passes, the refund commits and
    // loses its answer; a retry with the key replays it.
    assert_eq!(arm("?endpoint=refunds").await.status, 204);
    delivered(a.confirm(&key(), order, RECIPIENT, "Not lost").await);
    let r = key();
    uncertain(a.refund(&r, &charged, 5980).await);
    let refund = delivered(a.lookup_refund(&r).await);
    assert!(refund.is_for(&charged, 5980));
    assert_eq!(delivered(a.refund(&r, &charged, 5980).await), refund);
    assert_eq!(env.count("provider_refunds"), 1);

    // Armed for charges: only a charge loses its answer.
    assert_eq!(arm("?endpoint=charges").await.status, 204);
    delivered(a.confirm(&key(), order, RECIPIENT, "Passes").await);
    let c = key();
    assert!(matches!(
        a.charge(&c, order, 1090, "EUR").await,
        Attempt::Uncertain { .. }
    ));
    assert!(matches!(a.lookup(&c).await, Attempt::Charged(_)));

    // Without a selector (as before): the next success of any effect.
    assert_eq!(arm("").await.status, 204);
    let any = key();
    uncertain(a.confirm(&any, order, RECIPIENT, "Lost too").await);
    delivered(a.lookup_confirmation(&any).await);
    assert!(matches!(
        a.charge(&key(), order, 1090, "EUR").await,
        Attempt::Charged(_)
    ));
    assert_eq!(env.count("provider_confirmations"), 5);
}

async fn a_failing_provider_refuses_every_effect_before_it(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &["--fail-rate", "1"]);
    let a = client(&server, SECRET_A);
    let k = key();
    for outcome in [
        a.confirm(&k, Uuid::new_v4(), RECIPIENT, "t").await,
        a.lookup_confirmation(&k).await,
    ] {
        match outcome {
            Effect::<FoundConfirmation>::Retry { after, reason } => {
                assert_eq!(after, Some(Duration::from_secs(1)));
                assert!(reason.starts_with("service-unavailable"), "{reason}");
            }
            other => panic!("expected a retry, got {other:?}"),
        }
    }
    let ch = format!("ch_{}", Uuid::new_v4().simple());
    for outcome in [a.refund(&k, &ch, 1).await, a.lookup_refund(&k).await] {
        assert!(
            matches!(outcome, Effect::<FoundRefund>::Retry { .. }),
            "{outcome:?}"
        );
    }
    // The lists are for checks and never fail on purpose.
    assert!(listed(&server, SECRET_A, "confirmations").await.is_empty());
    assert!(listed(&server, SECRET_A, "refunds").await.is_empty());
    assert_eq!(env.count("provider_confirmations"), 0);
    assert_eq!(env.count("idempotency_records"), 0);
}

/// The store of `env` (migrated) and a charge of A's in it.
async fn open_with_charge(env: &Env) -> (Db, String, Uuid) {
    let db = Db::open(&env.url).await.expect("open");
    let scope = scope_of(SECRET_A);
    let written = db
        .insert_charge(&NewCharge {
            scope: scope.clone(),
            idempotency_key: key(),
            order_id: Uuid::new_v4(),
            amount_cents: 5980,
            currency: "EUR".into(),
        })
        .await
        .expect("a charge");
    let idemkey_provider_sim::store::ChargeWrite::Created(charge) = written else {
        panic!("a new charge");
    };
    (db, scope, charge.id)
}

/// Concurrent writes, as a layer that runs a request again after its lease
/// makes them: one confirmation per key, and one refund per key and per
/// charge, every writer getting the row that won.
async fn concurrent_writes_make_one_effect(backend: Backend) {
    let env = Env::new(backend);
    let (db, scope, charge_id) = open_with_charge(&env).await;
    let confirmation = NewConfirmation {
        scope: scope.clone(),
        idempotency_key: key(),
        order_id: Uuid::new_v4(),
        recipient: RECIPIENT.into(),
        text: "Thank you".into(),
    };
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let (db, c) = (db.clone(), confirmation.clone());
            tokio::spawn(async move { db.insert_confirmation(&c).await.expect("insert") })
        })
        .collect();
    let (mut created, mut existing) = (Vec::new(), Vec::new());
    for writer in writers {
        match writer.await.expect("join") {
            ConfirmationWrite::Created(c) => created.push(c),
            ConfirmationWrite::Existing(c) => existing.push(c),
        }
    }
    assert_eq!(created.len(), 1, "{created:?}");
    assert!(existing.iter().all(|c| *c == created[0]), "{existing:?}");
    assert_eq!(
        db.confirmations(&scope).await.expect("list"),
        [created[0].clone()]
    );

    // Half the writers share one key, half have a key each: one refund.
    let shared = key();
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let refund = NewRefund {
                scope: scope.clone(),
                idempotency_key: if i % 2 == 0 { shared.clone() } else { key() },
                charge_id,
                amount_cents: 5980,
            };
            let db = db.clone();
            tokio::spawn(async move {
                (
                    refund.idempotency_key.clone(),
                    db.insert_refund(&refund).await.expect("insert"),
                )
            })
        })
        .collect();
    let mut made = Vec::new();
    let mut outcomes = Vec::new();
    for writer in writers {
        let (k, written) = writer.await.expect("join");
        match written {
            RefundWrite::Created(r) => made.push(r),
            other => outcomes.push((k, other)),
        }
    }
    assert_eq!(made.len(), 1, "{made:?} {outcomes:?}");
    let refund = &made[0];
    for (k, outcome) in outcomes {
        match outcome {
            RefundWrite::Existing(r) => {
                assert_eq!((&r, &k), (refund, &refund.idempotency_key));
            }
            RefundWrite::AlreadyRefunded(r) => {
                assert_eq!(&r, refund);
                assert_ne!(k, refund.idempotency_key);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        db.refunds(&scope).await.expect("list"),
        std::slice::from_ref(refund)
    );
    assert_eq!(
        db.refund(&scope, &refund.idempotency_key)
            .await
            .expect("read"),
        Some(refund.clone())
    );
    // The key decides first: a repeat of the refund's key gets it, whatever
    // it asks; another scope has no such charge.
    let repeat = NewRefund {
        scope: scope.clone(),
        idempotency_key: refund.idempotency_key.clone(),
        charge_id,
        amount_cents: 1,
    };
    assert_eq!(
        db.insert_refund(&repeat).await.expect("insert"),
        RefundWrite::Existing(refund.clone())
    );
    let stranger = NewRefund {
        scope: scope_of(SECRET_B),
        idempotency_key: key(),
        ..repeat
    };
    assert_eq!(
        db.insert_refund(&stranger).await.expect("insert"),
        RefundWrite::NoCharge
    );
    db.store().close();
}

/// A database of the simulator's version 2 (its two tables, a request
/// logged) opens at version 3: the tables adopted, the new ones made, the
/// request log's rows kept as the charges' and its sequence going on.
async fn a_database_of_version_two_is_migrated(backend: Backend) {
    let env = Env::new(backend);
    let scope = scope_of(SECRET_A);
    let version_two = [
        include_str!("../../provider-sim/src/store/postgres/0007_provider_charges.sql"),
        include_str!("../../provider-sim/src/store/postgres/0008_provider_requests.sql"),
    ];
    match backend {
        Backend::Postgres => {
            env.sql(&format!(
                "{}{}INSERT INTO provider_requests (scope, kind, idempotency_key) \
                 VALUES ('{scope}', 'request', 'old-key');",
                version_two[0], version_two[1]
            ));
        }
        Backend::Sqlite => {
            let conn = rusqlite::Connection::open(&env.db).expect("open sqlite");
            conn.execute_batch(&format!(
                "{}{}INSERT INTO provider_requests (scope, kind, idempotency_key, created_at) \
                 VALUES ('{scope}', 'request', 'old-key', 1);",
                include_str!("../../provider-sim/src/store/sqlite/0007_provider_charges.sql"),
                include_str!("../../provider-sim/src/store/sqlite/0008_provider_requests.sql"),
            ))
            .expect("version two");
        }
    }
    let db = Db::open(&env.url).await.expect("open");
    assert!(
        db.store()
            .pending_migrations()
            .await
            .expect("pending")
            .is_empty()
    );
    let book = env.sql(
        "SELECT version, adopted FROM idemkey_migrations \
         WHERE component = 'provider-sim' ORDER BY version",
    );
    let book: Vec<(&str, bool)> = book
        .lines()
        .map(|line| {
            let (version, adopted) = line.split_once('|').expect("a row");
            (version, matches!(adopted, "t" | "1"))
        })
        .collect();
    assert_eq!(book, [("1", true), ("2", true), ("3", false)]);
    db.log_provider_request(
        &scope,
        Endpoint::Refunds,
        idemkey_provider_sim::store::RequestKind::Lookup,
        "new-key",
        None,
    )
    .await
    .expect("log");
    let log = db.provider_requests(&scope, None).await.expect("the log");
    let rows: Vec<(i64, &str, &str, &str)> = log
        .iter()
        .map(|r| {
            (
                r.seq,
                r.kind.as_str(),
                r.effect.as_str(),
                r.idempotency_key.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, "request", "charges", "old-key"),
            (2, "lookup", "refunds", "new-key")
        ]
    );
    assert_eq!(
        db.provider_requests(&scope, Some(Endpoint::Charges))
            .await
            .expect("the log")
            .len(),
        1
    );
    // A run is named after its effect.
    let mismatch = match backend {
        Backend::Postgres => env.cluster().psql(
            &env.db,
            &format!(
                "INSERT INTO provider_requests (scope, kind, idempotency_key, effect) \
                 VALUES ('{scope}', 'charge', 'k', 'refunds')"
            ),
        )
        .map_err(|e| e.to_string()),
        Backend::Sqlite => rusqlite::Connection::open(&env.db)
            .expect("open")
            .execute(
                &format!(
                    "INSERT INTO provider_requests (scope, kind, idempotency_key, effect, created_at) \
                     VALUES ('{scope}', 'charge', 'k', 'refunds', 1)"
                ),
                [],
            )
            .map(|_| String::new())
            .map_err(|e| e.to_string()),
    };
    assert!(mismatch.is_err(), "{mismatch:?}");
    db.store().close();
}

/// PostgreSQL: a refund whose insert waited for another transaction's
/// refund of the same charge reads, once that one commits, what it
/// conflicted with (the charge refunded under another key); once that one
/// rolls back, it makes the refund.
async fn a_refund_waiting_on_another_reads_what_won(backend: Backend) {
    let env = Env::new(backend);
    let (db, scope, charge_id) = open_with_charge(&env).await;
    let (mut other, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    for commit in [false, true] {
        let tx = other.transaction().await.expect("begin");
        let theirs = Uuid::new_v4();
        tx.execute(
            "INSERT INTO provider_refunds (id, scope, idempotency_key, charge_id, order_id, \
                                           amount_cents, currency) \
             SELECT $1, scope, $2, id, order_id, amount_cents, currency \
             FROM provider_charges WHERE scope = $3 AND id = $4",
            &[&theirs, &key(), &scope, &charge_id],
        )
        .await
        .expect("their refund");
        let writer = {
            let db = db.clone();
            let refund = NewRefund {
                scope: scope.clone(),
                idempotency_key: key(),
                charge_id,
                amount_cents: 5980,
            };
            tokio::spawn(async move { db.insert_refund(&refund).await })
        };
        common::eventually("the refund waits for the lock", async || {
            env.sql(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock' \
                   AND query LIKE '%provider_refunds%'",
            ) == "1"
        })
        .await;
        if commit {
            tx.commit().await.expect("commit");
            match writer.await.expect("join").expect("insert") {
                RefundWrite::AlreadyRefunded(found) => assert_eq!(found.id, theirs),
                other => panic!("expected their refund, got {other:?}"),
            }
        } else {
            tx.rollback().await.expect("rollback");
            match writer.await.expect("join").expect("insert") {
                RefundWrite::Created(made) => {
                    // Gone again, for the second round.
                    env.sql(&format!(
                        "DELETE FROM provider_refunds WHERE id = '{}'",
                        made.id
                    ));
                }
                other => panic!("expected a new refund, got {other:?}"),
            }
        }
    }
    assert_eq!(env.count("provider_refunds"), 1);
    drop(other);
    let _ = task.await;
    db.store().close();
}

on_postgres!(a_refund_waiting_on_another_reads_what_won);

on_each_backend!(
    a_key_sends_one_confirmation_and_replays_it,
    a_charge_is_refunded_once,
    lose_next_loses_one_endpoints_answer_after_its_effect,
    a_failing_provider_refuses_every_effect_before_it,
    concurrent_writes_make_one_effect,
    a_database_of_version_two_is_migrated,
);
