//! What counting costs a cached replay: the request counter and the
//! outbox's delivery counter, on one thread and on two at once, with no
//! recorder and with one installed (a registry behind a read lock, as
//! `metrics-util`'s is). Only the public API, so the same file measures
//! the version before the handles were cached (docs/performance.md).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, RwLock};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use idemkey::metrics::{FrontEnd, Metrics};
use idemkey::outbox::OutboxMetrics;
use idemkey_core::OperationId;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

const OPERATION: OperationId = OperationId::from_static("POST /orders:v1");

/// A recorder keeping each counter once, found by its key under a read
/// lock.
#[derive(Default)]
struct Registry(RwLock<HashMap<Key, Arc<Cell>>>);

#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
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
        if let Some(cell) = self.0.read().expect("lock").get(key) {
            return Counter::from_arc(Arc::clone(cell));
        }
        let mut map = self.0.write().expect("lock");
        Counter::from_arc(Arc::clone(map.entry(key.clone()).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// `iters` counts on each of `threads` threads at once; the slowest
/// thread's time.
fn counted(threads: usize, iters: u64, count: &(dyn Fn() + Sync)) -> Duration {
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let t = Instant::now();
                    for _ in 0..iters {
                        count();
                    }
                    t.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .max()
            .unwrap_or_default()
    })
}

fn counting(c: &mut Criterion, recorder: &str) {
    let metrics = Metrics::default();
    let outbox = OutboxMetrics::default();
    let mut g = c.benchmark_group(format!("count/{recorder}"));
    for threads in [1, 2] {
        g.bench_function(format!("replay/{threads}"), |b| {
            b.iter_custom(|iters| {
                counted(threads, iters, &|| {
                    metrics.count(FrontEnd::Named("orders"), black_box(&OPERATION), "replayed");
                })
            });
        });
        g.bench_function(format!("delivery/{threads}"), |b| {
            b.iter_custom(|iters| {
                counted(threads, iters, &|| {
                    outbox.count(black_box("charge"), "delivered")
                })
            });
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    counting(c, "none");
    metrics::set_global_recorder(Registry::default()).expect("the only recorder");
    counting(c, "installed");
}

criterion_group!(metrics_benches, benches);
criterion_main!(metrics_benches);
