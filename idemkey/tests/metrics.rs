//! Metrics by default: a recorder the application installs (here a small
//! registry, as `metrics-exporter-prometheus` or `metrics-util`'s
//! `DebuggingRecorder` would be) sees the `idemkey_*` series of every
//! front end (the Layer, `in_transaction` through a flow's start, the
//! outbox worker delivering the flow's steps) with no call to the library,
//! also when it is installed after the first counts; and a label set's
//! handle is asked of the recorder once, not per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idemkey::Db;
use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows};
use idemkey::idempotency::{RecordKey, Scope};
use idemkey::in_transaction::Options;
use idemkey::layer::IdempotencyLayer;
use idemkey::metrics::{FrontEnd, Metrics};
use idemkey::outbox::{OutboxMetrics, Worker, WorkerSettings};
use idemkey::store::StoreSettings;
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use serde_json::json;
use tower::ServiceExt as _;

/// A recorder keeping each counter once, and how often each was asked
/// for (a front end that looked its handle up per request would ask once
/// per request, building the key's labels each time).
#[derive(Clone, Default)]
struct Registry(Arc<Mutex<HashMap<Key, Arc<Value>>>>);

#[derive(Default)]
struct Value(AtomicU64, AtomicU64);

impl CounterFn for Value {
    fn increment(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn absolute(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }
}

impl Recorder for Registry {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut map = self.0.lock().expect("lock");
        let value = map.entry(key.clone()).or_default();
        value.1.fetch_add(1, Ordering::Relaxed);
        Counter::from_arc(Arc::clone(value))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

impl Registry {
    /// The counter `name` with exactly `labels` (in any order); 0 if none.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.read(name, labels, |v| &v.0)
    }

    /// How often the counter `name` with `labels` was registered.
    fn registrations(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.read(name, labels, |v| &v.1)
    }

    fn read(&self, name: &str, labels: &[(&str, &str)], of: fn(&Value) -> &AtomicU64) -> u64 {
        let map = self.0.lock().expect("lock");
        map.iter()
            .filter(|(key, _)| {
                key.name() == name
                    && key.labels().count() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
            })
            .map(|(_, value)| of(value).load(Ordering::Relaxed))
            .sum()
    }
}

/// Counted before any recorder is installed, so that the handle cached
/// for this label set is the no-op one.
const EARLY: OperationId = OperationId::from_static("POST /early:v1");

/// The process's recorder, installed once for every test of this file,
/// after one count of [`EARLY`].
fn recorder() -> &'static Registry {
    static RECORDER: OnceLock<Registry> = OnceLock::new();
    RECORDER.get_or_init(|| {
        Metrics::global().count(FrontEnd::Layer, &EARLY, "executed");
        let registry = Registry::default();
        metrics::set_global_recorder(registry.clone()).expect("the only recorder");
        registry
    })
}

/// A test's SQLite file, removed with its WAL files at the end.
struct File(std::path::PathBuf);

impl File {
    fn new(name: &str) -> Self {
        Self(std::env::temp_dir().join(format!("idemkey-metrics-{name}-{}.db", std::process::id())))
    }
    fn url(&self) -> String {
        format!("sqlite://{}", self.0.display())
    }
}

impl Drop for File {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

const LAYER_OPERATION: OperationId = OperationId::from_static("POST /payments:v1");
const FLOW_OPERATION: OperationId = OperationId::from_static("POST /purchases:v1");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_recorder_sees_every_front_end_without_a_call() {
    let recorder = recorder();
    let requests = |front_end: &str, operation: &OperationId, outcome: &str| {
        recorder.value(
            "idemkey_requests_total",
            &[
                ("front_end", front_end),
                ("operation", operation.as_str()),
                ("outcome", outcome),
            ],
        )
    };

    // The Layer, given no metrics.
    let file = File::new("layer");
    let db = Db::open(&file.url(), &StoreSettings::default())
        .await
        .expect("open");
    let layer =
        IdempotencyLayer::new(db, |_| Some("account-1".to_owned())).operation(LAYER_OPERATION);
    let app: Router = Router::new()
        .route(
            "/payments",
            post(|| async { (StatusCode::CREATED, "paid") }),
        )
        .route_layer(layer);
    for _ in 0..2 {
        let request = Request::post("/payments")
            .header("idempotency-key", "\"pay-1\"")
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .expect("a request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    assert_eq!(requests("layer", &LAYER_OPERATION, "executed"), 1);
    assert_eq!(requests("layer", &LAYER_OPERATION, "replayed"), 1);

    // A label set first counted without a recorder is seen once there is
    // one: its handle is asked again.
    Metrics::global().count(FrontEnd::Layer, &EARLY, "executed");
    assert_eq!(requests("layer", &EARLY, "executed"), 1);
    assert_eq!(
        Metrics::global().counted(FrontEnd::Layer, &EARLY, "executed"),
        2
    );

    // A flow's start (through `in_transaction`, given no metrics) and the
    // worker that runs its step.
    let file = File::new("flow");
    let db = Db::open(&file.url(), &StoreSettings::default())
        .await
        .expect("open");
    let flow = Flow::new("purchase").external(
        "charge",
        External::new(|_| std::future::ready(Attempt::Done(json!({ "id": 1 })))),
    );
    let settings = FlowSettings {
        wait: Duration::ZERO,
        ..FlowSettings::default()
    };
    let flows = Flows::new(db.clone(), vec![flow], settings).expect("flows");
    let worker = flows.attach(Worker::new(db.clone(), WorkerSettings::default()));
    let key = RecordKey {
        scope: Scope::new("account-1").expect("a scope"),
        operation: FLOW_OPERATION,
        key: IdempotencyKey::parse(b"\"buy-1\"", KeyProfile::Lenient).expect("a key"),
    };
    let input = json!({ "sku": "tea" });
    let fingerprint = Fingerprint::of_value(&FLOW_OPERATION, &input);
    let options = Options::new(Duration::from_secs(3600));
    flows
        .start("purchase", &key, fingerprint, &input, &options)
        .await
        .expect("start");
    while worker.run_once().await.expect("deliver") > 0 {}
    flows
        .start("purchase", &key, fingerprint, &input, &options)
        .await
        .expect("retry");
    let started: u64 = idemkey::metrics::OUTCOMES
        .iter()
        .map(|outcome| requests("in_transaction", &FLOW_OPERATION, outcome))
        .sum();
    assert_eq!(started, 2, "both starts counted");
    assert_eq!(requests("in_transaction", &FLOW_OPERATION, "executed"), 1);
    assert!(
        recorder.value(
            "idemkey_outbox_deliveries_total",
            &[("effect", "flow-step"), ("outcome", "delivered")],
        ) >= 1,
        "the worker's deliveries"
    );
}

/// Each label set's handle is asked of the recorder once, not per count
/// (which built its labels, the operation's `String` among them, and
/// looked it up in the recorder's registry on every request).
#[test]
fn a_label_sets_handle_is_registered_once() {
    let recorder = recorder();
    let metrics = Metrics::default();
    let outbox = OutboxMetrics::default();
    let operation = OperationId::from_static("POST /things:v1");
    for _ in 0..1000 {
        metrics.count(FrontEnd::InTransaction, &operation, "replayed");
        outbox.count("charge", "delivered");
    }
    let request = [
        ("front_end", "in_transaction"),
        ("operation", operation.as_str()),
        ("outcome", "replayed"),
    ];
    let delivery = [("effect", "charge"), ("outcome", "delivered")];
    assert_eq!(recorder.value("idemkey_requests_total", &request), 1000);
    assert_eq!(
        recorder.value("idemkey_outbox_deliveries_total", &delivery),
        1000
    );
    assert_eq!(
        recorder.registrations("idemkey_requests_total", &request),
        1
    );
    assert_eq!(
        recorder.registrations("idemkey_outbox_deliveries_total", &delivery),
        1
    );
    assert_eq!(
        metrics.counted(FrontEnd::InTransaction, &operation, "replayed"),
        1000
    );
    assert_eq!(outbox.deliveries("charge", "delivered"), 1000);
}
