//! Demo mode, made safe: only on a loopback bind; its own accounts, marked
//! as demo mode's, never an existing account found by name; `/demo/*`
//! refuses cross-site requests; the tokens are rotated at each start.

#[macro_use]
mod common;

use std::time::Duration;

use common::{BODY, Backend, Env, Server, new_key, refused_at_start};
use idemkey_server::payments::client::{Effect, ProviderClient};

/// A directory with the demo's page.
struct Site(std::path::PathBuf);

impl Site {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("idemkey-site-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), "<h1>shop</h1>").unwrap();
        Self(dir)
    }

    fn serve(&self, env: &Env) -> Server {
        self.serve_with(env, &[])
    }

    fn serve_with(&self, env: &Env, extra: &[&str]) -> Server {
        let dir = self.0.display().to_string();
        let mut args = vec!["--demo", "--demo-dir", dir.as_str()];
        args.extend_from_slice(extra);
        env.serve(&args)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The demo accounts' tokens this start serves: `[(name, token)]`.
async fn demo_tokens(server: &Server) -> Vec<(String, String)> {
    let reply = server.get("", "/demo/tokens").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_owned(),
                a["token"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `account list` rows: `[id, created, tokens, kind, name]`.
fn accounts(env: &Env) -> Vec<Vec<String>> {
    let (ok, out, err) = env.cli(&["account", "list"]);
    assert!(ok, "{err}");
    out.lines()
        .skip(1)
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

/// Demo mode serves tokens without authentication: refused on a
/// non-loopback address, from the flag and from the environment, before
/// anything is opened.
#[test]
fn demo_mode_is_refused_on_a_non_loopback_bind() {
    let url = "sqlite:///nonexistent-dir/never-opened.db";
    let err = refused_at_start(
        &[
            "serve",
            "--demo",
            "--bind",
            "0.0.0.0:3000",
            "--database-url",
            url,
        ],
        &[],
    );
    assert!(err.contains("needs a loopback --bind"), "{err}");
    assert!(err.contains("not 0.0.0.0:3000"), "{err}");
    let err = refused_at_start(
        &["serve", "--database-url", url],
        &[("IDEMKEY_DEMO", "1"), ("IDEMKEY_BIND", "[::]:3000")],
    );
    assert!(err.contains("needs a loopback --bind"), "{err}");
    assert!(
        !err.contains("cannot open"),
        "refused before the database: {err}"
    );
}

/// An account that happens to be called `demo` is not demo mode's: it gets
/// no token, and demo mode's accounts are its own (marked as such).
async fn an_existing_account_named_demo_gets_no_token(backend: Backend) {
    let env = Env::new(backend);
    let theirs = env.account("demo");
    let site = Site::new();
    let server = site.serve(&env);
    let served = demo_tokens(&server).await;
    assert_eq!(served.len(), 2);
    assert_eq!(
        (served[0].0.as_str(), served[1].0.as_str()),
        ("demo", "demo-b")
    );
    assert!(served.iter().all(|(_, t)| *t != theirs));

    let listed = accounts(&env);
    assert_eq!(listed.len(), 3, "{listed:?}");
    let existing: Vec<_> = listed.iter().filter(|a| a[3] == "account").collect();
    assert_eq!(existing.len(), 1, "{listed:?}");
    assert_eq!(
        (existing[0][2].as_str(), existing[0][4].as_str()),
        ("1", "demo"),
        "the existing account keeps its one token"
    );
    let mut kinds: Vec<_> = listed
        .iter()
        .filter(|a| a[3] == "demo")
        .map(|a| (a[2].as_str(), a[4].as_str()))
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, [("1", "demo"), ("1", "demo-b")]);

    // Separate accounts: an order through the demo's token is not theirs.
    assert_eq!(
        server
            .post_order(&served[0].1, &new_key(), BODY)
            .await
            .status,
        201
    );
    let mine = server.get(&theirs, "/orders").await;
    assert_eq!(mine.json()["orders"].as_array().map(Vec::len), Some(0));
}

/// `/demo/*` answers only its own page: a cross-site POST to a switch is
/// refused (and arms nothing), by Fetch Metadata, by Origin, or by a Host
/// that is not a loopback name (DNS rebinding); the same page's POST and a
/// tool without Origin are accepted; the token endpoints are guarded alike.
async fn cross_site_requests_to_the_demo_are_refused(backend: Backend) {
    let env = Env::new(backend);
    let site = Site::new();
    let server = site.serve(&env);
    let token = demo_tokens(&server).await[0].1.clone();
    let switch = format!("{}/demo/lose-next-response", server.base);
    let host = server.base.trim_start_matches("http://").to_owned();
    let foreign: [&[(&str, &str)]; 4] = [
        &[("origin", "http://evil.example")],
        &[
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://evil.example"),
        ],
        &[("sec-fetch-site", "same-site")],
        &[("host", "evil.example"), ("sec-fetch-site", "same-origin")],
    ];
    for headers in foreign {
        for (method, url) in [
            ("POST", switch.clone()),
            (
                "POST",
                format!("{}/demo/lose-next-charge-response", server.base),
            ),
            (
                "POST",
                format!("{}/demo/lose-next-step-response?step=confirm", server.base),
            ),
            ("GET", format!("{}/demo/tokens", server.base)),
            ("GET", format!("{}/demo/token", server.base)),
        ] {
            let mut request = server.client.request(method.parse().unwrap(), url.as_str());
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let reply = common::Reply::from(request.send().await.unwrap()).await;
            reply.assert_problem(403, "cross-site-request");
            assert!(!reply.body.contains("idk_"), "{}", reply.body);
        }
    }
    // Nothing was armed: the next order is answered.
    assert_eq!(
        server.post_order(&token, &new_key(), BODY).await.status,
        201
    );

    let origin = format!("http://{host}");
    for headers in [
        vec![
            ("origin", origin.as_str()),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![("origin", origin.as_str())],
    ] {
        let mut request = server.client.post(&switch);
        for (name, value) in &headers {
            request = request.header(*name, *value);
        }
        let armed = common::Reply::from(request.send().await.unwrap()).await;
        assert_eq!(
            (armed.status, armed.body.as_str()),
            (200, r#"{"armed":true}"#)
        );
        // Armed: the next order's response is lost (and it committed).
        let key = new_key();
        let lost = server.order_request(&token, &key, BODY).send().await;
        assert!(lost.is_err(), "the armed switch lost the response");
        let retry = server.post_order(&token, &key, BODY).await;
        assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    }
    // A tool that sends no Origin (curl) still reads the tokens.
    assert_eq!(demo_tokens(&server).await[0].1, token);
}

/// Each start replaces the demo accounts' tokens: the previous start's get
/// 401, the new ones work, on the same accounts (their orders stay).
async fn the_previous_starts_demo_tokens_are_revoked(backend: Backend) {
    let env = Env::new(backend);
    let site = Site::new();
    let first = site.serve(&env);
    let old = demo_tokens(&first).await;
    let key = new_key();
    assert_eq!(first.post_order(&old[0].1, &key, BODY).await.status, 201);
    drop(first);

    let second = site.serve(&env);
    let new = demo_tokens(&second).await;
    for ((_, old), (_, new)) in old.iter().zip(&new) {
        assert_ne!(old, new);
        second
            .get(old, "/orders")
            .await
            .assert_problem(401, "unauthorized");
        assert_eq!(second.get(new, "/orders").await.status, 200);
    }
    let lookup = format!("/operations/{}", key.trim_matches('"'));
    assert_eq!(
        second.get(&new[0].1, &lookup).await.json()["state"],
        "completed",
        "the same demo account"
    );
    let listed = accounts(&env);
    assert_eq!(listed.len(), 2, "no new accounts: {listed:?}");
    assert!(
        listed.iter().all(|a| a[2] == "1" && a[3] == "demo"),
        "{listed:?}"
    );
}

/// The secret of the provider in the charge switch's test.
const PROVIDER_SECRET: &str = "demo-provider-secret";

/// `POST /demo/lose-next-charge-response` from the page (no credentials).
async fn arm_charge_switch(server: &Server) -> common::Reply {
    let response = server
        .client
        .post(format!("{}/demo/lose-next-charge-response", server.base))
        .send()
        .await
        .expect("send");
    common::Reply::from(response).await
}

/// The page's "lose the provider's next answer": the server forwards to the
/// provider's switch with its payments secret (404 without a provider, 503
/// when the provider refuses the secret); the next charge commits at the
/// provider and its answer is lost, the worker reconciles, and the order
/// ends charged with exactly one charge.
async fn the_charge_switch_arms_the_provider_and_the_order_is_charged_once(backend: Backend) {
    let env = Env::new(backend);
    let site = Site::new();
    let provider = Server::provider(&["--database-url", &env.url, "--token", PROVIDER_SECRET]);
    let with_secret = |secret: &str| {
        site.serve_with(
            &env,
            &["--payments-url", &provider.base, "--payments-token", secret],
        )
    };
    let alone = site.serve(&env);
    arm_charge_switch(&alone)
        .await
        .assert_problem(404, "not-found");
    drop(alone);
    let refused = with_secret("not-the-secret");
    arm_charge_switch(&refused)
        .await
        .assert_problem(503, "service-unavailable");
    drop(refused);

    let server = with_secret(PROVIDER_SECRET);
    let token = demo_tokens(&server).await[0].1.clone();
    let armed = arm_charge_switch(&server).await;
    assert_eq!(
        (armed.status, armed.body.as_str()),
        (200, r#"{"armed":true}"#)
    );
    let created = server.post_order(&token, &new_key(), BODY).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let payment = loop {
        let payment = server.get(&token, &format!("/orders/{id}")).await.json()["payment"].clone();
        if payment["status"] != "pending" {
            break payment;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still pending: {payment}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(payment["status"], "charged", "{payment}");
    assert!(
        payment["attempts"].as_u64().unwrap() >= 2,
        "the lost answer cost an attempt: {payment}"
    );
    let charges = provider.get(PROVIDER_SECRET, "/charges").await.json();
    let of_order: Vec<_> = charges["charges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["order_id"] == id.as_str())
        .collect();
    assert_eq!(of_order.len(), 1, "{charges}");
    assert_eq!(of_order[0]["id"], payment["charge_id"]);
}

/// `POST {path}` from the page (no credentials).
async fn arm(server: &Server, path: &str) -> common::Reply {
    let response = server
        .client
        .post(format!("{}{path}", server.base))
        .send()
        .await
        .expect("send");
    common::Reply::from(response).await
}

fn delivered<T: std::fmt::Debug>(effect: Effect<T>) -> T {
    match effect {
        Effect::Delivered(found) => found,
        other => panic!("expected a delivered effect, got {other:?}"),
    }
}

fn lost<T: std::fmt::Debug>(effect: Effect<T>) {
    assert!(
        matches!(effect, Effect::Uncertain { .. }),
        "expected a lost answer, got {effect:?}"
    );
}

/// The per-step switch (`POST /demo/lose-next-step-response?step=`):
/// refused cross-site (above), 400 for a step without a switch, 404 without
/// a provider, 503 when the provider refuses the secret; armed, it forwards
/// its step's endpoint to the provider's `POST /faults/lose-next`, so only
/// that endpoint's next effect loses its answer (the charge switch, kept,
/// now names `charges` too). Then a purchase with the confirmation's answer
/// lost still ends with one confirmation, its `confirm` step retried.
async fn the_step_switch_forwards_its_endpoint_and_the_purchase_confirms_once(backend: Backend) {
    let env = Env::new(backend);
    let site = Site::new();
    let provider = Server::provider(&["--database-url", &env.url, "--token", PROVIDER_SECRET]);
    let with_secret = |secret: &str| {
        site.serve_with(
            &env,
            &["--payments-url", &provider.base, "--payments-token", secret],
        )
    };
    let confirm = "/demo/lose-next-step-response?step=confirm";
    let alone = site.serve(&env);
    arm(&alone, confirm).await.assert_problem(404, "not-found");
    drop(alone);
    let refused = with_secret("not-the-secret");
    arm(&refused, confirm)
        .await
        .assert_problem(503, "service-unavailable");
    drop(refused);

    let server = with_secret(PROVIDER_SECRET);
    for path in [
        "/demo/lose-next-step-response",
        "/demo/lose-next-step-response?step=",
        "/demo/lose-next-step-response?step=reserve",
        "/demo/lose-next-step-response?step=confirmations",
    ] {
        arm(&server, path)
            .await
            .assert_problem(400, "request-invalid");
    }
    let client = ProviderClient::new(&provider.base, PROVIDER_SECRET, Duration::from_secs(10))
        .expect("a client");
    let key = || new_key().trim_matches('"').to_owned();
    let order = uuid::Uuid::new_v4();
    let recipient = "demo@example.invalid";

    // step=confirm: a charge is answered, the next confirmation is lost
    // (it committed: the lookup by its key finds it).
    let armed = arm(&server, confirm).await;
    assert_eq!(armed.status, 200, "{}", armed.body);
    assert_eq!(
        armed.json(),
        serde_json::json!({"armed": true, "step": "confirm", "endpoint": "confirmations"})
    );
    delivered(client.charge_effect(&key(), order, 990, "EUR").await);
    let k = key();
    lost(client.confirm(&k, order, recipient, "lost").await);
    assert!(delivered(client.lookup_confirmation(&k).await).is_for(order, recipient));

    // step=charge, and the older charge switch: a confirmation is answered,
    // the next charge is lost.
    for (path, body) in [
        (
            "/demo/lose-next-step-response?step=charge",
            serde_json::json!({"armed": true, "step": "charge", "endpoint": "charges"}),
        ),
        (
            "/demo/lose-next-charge-response",
            serde_json::json!({"armed": true}),
        ),
    ] {
        let armed = arm(&server, path).await;
        assert_eq!((armed.status, armed.json()), (200, body), "{path}");
        delivered(client.confirm(&key(), order, recipient, "answered").await);
        let k = key();
        lost(client.charge_effect(&k, order, 990, "EUR").await);
        assert!(delivered(client.lookup_charge(&k).await).is_for(order, 990, "EUR"));
    }

    // A purchase with the confirmation's answer lost: done, one
    // confirmation of it at the provider, its confirm step attempted twice.
    let token = demo_tokens(&server).await[0].1.clone();
    assert_eq!(arm(&server, confirm).await.status, 200);
    let started = server
        .post_purchase(&token, &new_key(), r#"{"sku":"TAZA-01","quantity":1}"#)
        .await;
    assert!(
        [201, 202].contains(&started.status),
        "{}: {}",
        started.status,
        started.body
    );
    let location = started.header("location").expect("a Location").to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ended = loop {
        let polled = server.get(&token, &location).await;
        assert_eq!(polled.status, 200, "{}", polled.body);
        let document = polled.json();
        if document.get("result_status").is_some() {
            break document;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {document}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ended["result_status"], 201, "{ended}");
    let steps = ended["steps"].as_array().unwrap();
    assert_eq!(steps[2]["name"], "confirm");
    assert_eq!(steps[2]["state"], "done", "{ended}");
    assert!(
        steps[2]["attempts"].as_i64().unwrap() >= 2,
        "the lost answer cost an attempt: {ended}"
    );
    let id = ended["id"].as_str().unwrap();
    let confirmations = provider.get(PROVIDER_SECRET, "/confirmations").await.json();
    let of_purchase: Vec<_> = confirmations["confirmations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["order_id"] == id)
        .collect();
    assert_eq!(of_purchase.len(), 1, "{confirmations}");
    assert_eq!(
        of_purchase[0]["id"], ended["result"]["confirmation_id"],
        "{ended}"
    );
}

on_each_backend!(
    the_step_switch_forwards_its_endpoint_and_the_purchase_confirms_once,
    the_charge_switch_arms_the_provider_and_the_order_is_charged_once,
    an_existing_account_named_demo_gets_no_token,
    cross_site_requests_to_the_demo_are_refused,
    the_previous_starts_demo_tokens_are_revoked,
);
