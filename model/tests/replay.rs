//! The model's paths, replayed against the real stores through the
//! server's `Records` trait: every store call of a path (claim and the
//! engine's `step` on what it read, take-over, complete, release, trim)
//! must give the outcome the model gave, and after each call the key's row
//! must be the model's row (state, fingerprint, claim token).
//!
//! Time is the store's: one model tick is `unit` of the database's clock.
//! Leases and windows last a quarter tick less than their ticks and the
//! retention half a tick more, so every comparison the store makes lands
//! a quarter tick away from a tick boundary, and the outcome is the
//! model's as long as each tick's calls finish within that quarter tick.
//! A replay that overruns it (a busy machine) starts again with a longer
//! tick; nothing here asserts how long anything took.

use std::collections::HashMap;
use std::time::Duration;

use idemkey_core::{Decision, ExpiryPolicy, KeyProfile, OperationId, Stored, UnixMillis};
use idemkey_model::{
    Action, Answer, Bounds, Mode, Phase, Protocol, Redo, Rejection, Row, State, Status, Walk,
    covering, fingerprint, transitions,
};
use idemkey_server::db::{Db, PgSettings};
use idemkey_server::idempotency::{
    self, Answer as EngineAnswer, ClaimToken, Claimed, NewClaim, Policy, Read, Record, RecordKey,
    Records as _, Scope, Step, StoredResponse, state_name,
};
use idemkey_testkit::PgCluster;
use stateright::{Checker as _, HasDiscoveries, Model as _};

mod stores {
    use super::*;

    /// A store to replay against, kept alive (with its files) while used.
    pub struct Target {
        pub url: String,
        _dir: Option<TempDir>,
    }

    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub fn postgres() -> Target {
        let cluster = PgCluster::shared().expect("start PostgreSQL");
        let db = cluster.fresh_database().expect("create a database");
        Target {
            url: db.url,
            _dir: None,
        }
    }

    pub fn sqlite() -> Target {
        let dir = std::env::temp_dir().join(format!("idemkey-replay-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Target {
            url: format!("sqlite://{}", dir.join("records.db").display()),
            _dir: Some(TempDir(dir)),
        }
    }
}

/// Every store the traces run against. A new backend of `Db` is one line
/// here (e.g. `("redis", stores::redis)` opening a `redis://` URL).
const STORES: [(&str, Open); 2] = [("postgres", stores::postgres), ("sqlite", stores::sqlite)];

/// Opens a fresh store.
type Open = fn() -> stores::Target;

const OPERATION: OperationId = OperationId::from_static("replay:v1");

/// Why a replay stopped early.
#[derive(Debug)]
enum Stop {
    /// A tick's calls overran their quarter tick: try a longer tick.
    Overran,
    /// The store's outcome is not the model's.
    Diverged(String),
}

/// Stops the replay with a divergence unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(Stop::Diverged(format!($($why)+)));
        }
    };
}

struct Replay<'a> {
    db: &'a Db,
    bounds: &'a Bounds,
    key: RecordKey,
    unit: Duration,
    /// The store's clock at tick 0.
    base: UnixMillis,
    /// The real claim of each model claim token.
    tokens: HashMap<u8, NewClaim>,
    /// The row each server's take-over was decided on, as the store read it.
    previous: HashMap<u8, Record>,
}

impl Replay<'_> {
    fn ms(&self, ticks: u8, quarters: i64) -> u64 {
        let unit = i64::try_from(self.unit.as_millis()).expect("a short unit");
        u64::try_from(i64::from(ticks) * unit + quarters * unit / 4).expect("positive")
    }

    fn duration(&self, ticks: u8, quarters: i64) -> Duration {
        Duration::from_millis(self.ms(ticks, quarters))
    }

    fn policy(&self) -> Policy {
        Policy {
            expiry: self.bounds.expiry,
            ..Policy::new(
                idempotency::Mode::Lease,
                self.duration(self.bounds.lease, -1),
                self.duration(self.bounds.window, -1),
            )
        }
    }

    /// Fails the attempt when the store's clock left tick `clock`'s first
    /// quarter.
    fn on_time(&self, read: &Read, clock: u8) -> Result<(), Stop> {
        if read.now.0 >= self.base.0 + self.ms(clock, 1) {
            return Err(Stop::Overran);
        }
        Ok(())
    }

    async fn read(&self) -> Read {
        self.db.read(&self.key).await.expect("read")
    }

    /// The key's real row is the model's.
    fn same_row(
        &self,
        real: Option<&Record>,
        model: Option<Row>,
        context: &str,
    ) -> Result<(), Stop> {
        match (real, model) {
            (None, None) => Ok(()),
            (Some(record), Some(row)) => {
                let state = match row.status {
                    Status::InFlight { .. } => "in_flight",
                    Status::Completed { .. } => "completed",
                    Status::Tombstone => "tombstone",
                };
                let real = state_name(&record.stored);
                ensure!(
                    real == state,
                    "{context}: the store's row is {real}, the model's {state}"
                );
                let stored_fingerprint = match record.stored {
                    Stored::InFlight { fingerprint, .. }
                    | Stored::Completed { fingerprint, .. }
                    | Stored::Tombstone { fingerprint } => Some(fingerprint),
                    Stored::Nothing => None,
                };
                ensure!(
                    stored_fingerprint == Some(fingerprint(row.payload)),
                    "{context}: the row's fingerprint is not the model's"
                );
                ensure!(
                    record.token == self.tokens[&row.token].token,
                    "{context}: the row's claim is not the model's"
                );
                Ok(())
            }
            (real, model) => Err(Stop::Diverged(format!(
                "{context}: the store holds {real:?}, the model {model:?}"
            ))),
        }
    }

    fn new_claim(&mut self, model_token: u8, payload: u8) -> NewClaim {
        let claim = NewClaim {
            token: ClaimToken::random(),
            fingerprint: fingerprint(payload),
            lease: self.duration(self.bounds.lease, -1),
        };
        self.tokens.insert(model_token, claim);
        claim
    }

    /// Runs one action of the model against the store; `before` and
    /// `after` are the model's states around it.
    async fn act(&mut self, before: &State, action: Action, after: &State) -> Result<(), Stop> {
        let context = format!("{action:?} at tick {}", before.clock);
        match action {
            Action::Step(server) => self.step(before, server, after, &context).await,
            Action::Tick => {
                let read = self.read().await;
                self.on_time(&read, before.clock)?;
                let start = self.base.0 + self.ms(after.clock, 0);
                loop {
                    let read = self.read().await;
                    if read.now.0 >= start {
                        return self.on_time(&read, after.clock);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Action::Trim => {
                // The model's round ends when nothing is left to do; a
                // PostgreSQL pass works on one snapshot, so two passes.
                for _ in 0..2 {
                    self.db
                        .trim(self.duration(self.bounds.retention, 2), 1000)
                        .await
                        .expect("trim");
                }
                Ok(())
            }
            // The network, crashes and the effect never reach the store.
            Action::Send { .. }
            | Action::Effect { .. }
            | Action::Deliver(_)
            | Action::Lose(_)
            | Action::Crash(_) => Ok(()),
        }
    }

    async fn step(
        &mut self,
        before: &State,
        server: u8,
        after: &State,
        context: &str,
    ) -> Result<(), Stop> {
        let next = after.servers[usize::from(server)];
        match before.servers[usize::from(server)] {
            Phase::Claim { client, .. } => {
                let payload = before.clients[usize::from(client)].payload;
                let claim = self.new_claim(before.next_token, payload);
                let claimed = self.db.claim(&self.key, &claim).await.expect("claim");
                let read = match claimed {
                    Claimed::Won => {
                        ensure!(
                            matches!(next, Phase::Effect { .. }),
                            "{context}: the store's claim won, the model went to {next:?}"
                        );
                        return Ok(());
                    }
                    Claimed::Taken(read) => read,
                };
                self.on_time(&read, before.clock)?;
                let policy = self.policy();
                let step = idempotency::step(&read, &self.key, fingerprint(payload), &policy);
                self.same_step(&step, next, context)?;
                if let Step::TakeOver(_, record) = step {
                    self.previous.insert(server, record);
                }
            }
            Phase::TakeOver { token, .. } => {
                let previous = self.previous.remove(&server).expect("a decision");
                let claim = self.tokens[&token];
                let won = self
                    .db
                    .take_over(&self.key, &previous, &claim)
                    .await
                    .expect("take over");
                ensure!(
                    won == matches!(next, Phase::Effect { .. }),
                    "{context}: the store's take-over returned {won}, the model went to {next:?}"
                );
            }
            Phase::Complete { token, .. } => {
                let response = StoredResponse::new(201, token.to_string());
                let stored = self
                    .db
                    .complete(
                        &self.key,
                        self.tokens[&token].token,
                        &response,
                        self.duration(self.bounds.window, -1),
                        None,
                    )
                    .await
                    .expect("complete");
                let model = matches!(
                    next,
                    Phase::Respond {
                        answer: Answer::Executed { stored: true, .. },
                        ..
                    }
                );
                ensure!(
                    stored == model,
                    "{context}: the store's complete returned {stored}, the model's {model}"
                );
            }
            Phase::Release { token, .. } => {
                let released = self
                    .db
                    .release(&self.key, self.tokens[&token].token)
                    .await
                    .expect("release");
                let model = after.row != before.row;
                ensure!(
                    released == model,
                    "{context}: the store's release returned {released}, the model's {model}"
                );
            }
            other => {
                return Err(Stop::Diverged(format!(
                    "{context}: {other:?} makes no store call"
                )));
            }
        }
        Ok(())
    }

    /// The engine's `step` on the store's read is the model's next phase.
    fn same_step(&self, step: &Step, next: Phase, context: &str) -> Result<(), Stop> {
        match (step, next) {
            (
                Step::Answer(EngineAnswer::Replayed(response)),
                Phase::Respond {
                    answer: Answer::Replayed { effect },
                    ..
                },
            ) => ensure!(
                response.body.as_deref() == Some(effect.to_string().as_bytes()),
                "{context}: the replayed response is not the model's effect {effect}"
            ),
            (
                Step::Answer(EngineAnswer::Rejected { decision, .. }),
                Phase::Respond {
                    answer: Answer::Rejected(rejection),
                    ..
                },
            ) => {
                let real = match decision {
                    Decision::InProgress { .. } => Some(Rejection::InProgress),
                    Decision::Reused => Some(Rejection::Reused),
                    Decision::Expired => Some(Rejection::Expired),
                    _ => None,
                };
                ensure!(
                    real == Some(rejection),
                    "{context}: the engine rejected with {decision:?}, the model with {rejection:?}"
                );
            }
            (Step::TakeOver(decision, _), Phase::TakeOver { redo, .. }) => {
                let expected = match redo {
                    Redo::TakeOver => Decision::TakeOver,
                    Redo::Reexecute => Decision::Reexecute,
                };
                ensure!(
                    *decision == expected,
                    "{context}: the engine decided {decision:?}, the model {redo:?}"
                );
            }
            (Step::Claim, Phase::Claim { .. } | Phase::Respond { .. }) => {}
            (step, next) => {
                return Err(Stop::Diverged(format!(
                    "{context}: the engine chose {step:?}, the model {next:?}"
                )));
            }
        }
        Ok(())
    }
}

/// Replays `walk` on `db`, with ticks of `unit`.
async fn replay_once(db: &Db, bounds: &Bounds, walk: &Walk, unit: Duration) -> Result<(), Stop> {
    let key = RecordKey {
        scope: Scope::new("replay").expect("a scope"),
        operation: OPERATION,
        key: idemkey_core::IdempotencyKey::parse(
            uuid::Uuid::new_v4().to_string().as_bytes(),
            KeyProfile::Lenient,
        )
        .expect("a key"),
    };
    let mut replay = Replay {
        db,
        bounds,
        key,
        unit,
        base: UnixMillis(0),
        tokens: HashMap::new(),
        previous: HashMap::new(),
    };
    replay.base = replay.read().await.now;
    for (i, &action) in walk.actions.iter().enumerate() {
        let (before, after) = (&walk.states[i], &walk.states[i + 1]);
        replay.act(before, action, after).await?;
        let read = replay.read().await;
        replay.on_time(&read, after.clock)?;
        let context = format!("after step {i} ({action:?})");
        replay.same_row(read.record.as_ref(), after.row, &context)?;
    }
    Ok(())
}

/// Replays each walk on every store, lengthening the tick when a busy
/// machine makes a replay overrun it, and returns the divergences.
async fn replay(bounds: &Bounds, walks: &[Walk]) -> Vec<String> {
    let mut divergences = Vec::new();
    for (name, open) in STORES {
        let target = open();
        let db = Db::open(&target.url, &PgSettings::default())
            .await
            .expect("open the store");
        for (n, walk) in walks.iter().enumerate() {
            let mut unit = Duration::from_millis(200);
            loop {
                match replay_once(&db, bounds, walk, unit).await {
                    Ok(()) => break,
                    Err(Stop::Overran) if unit < Duration::from_secs(6) => unit *= 2,
                    Err(Stop::Overran) => panic!("{name}: walk {n} overran a {unit:?} tick"),
                    Err(Stop::Diverged(why)) => {
                        divergences.push(format!("{name}, walk {n}: {why}"));
                        break;
                    }
                }
            }
        }
        let calls = walks
            .iter()
            .flat_map(|w| &w.actions)
            .filter(|a| matches!(a, Action::Step(_) | Action::Trim | Action::Tick))
            .count();
        println!(
            "{name}: {} paths, {calls} store calls and ticks replayed",
            walks.len()
        );
    }
    divergences
}

/// The shortest counterexample of the model with the stale take-over put
/// back.
fn stale_take_over_counterexample() -> Vec<Action> {
    let mut bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute);
    bounds.stale_take_over = true;
    Protocol::new(bounds)
        .checker()
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join()
        .discovery(idemkey_model::properties::NEVER_OVERWRITTEN)
        .expect("a counterexample")
        .into_actions()
}

/// The steps of the stale take-over's counterexample: every store refuses
/// the take-over, as the fixed model does, and keeps the completed record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_take_over_counterexample_is_refused_by_every_store() {
    let bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute);
    let actions = stale_take_over_counterexample();
    let walk = Walk::follow(&Protocol::new(bounds.clone()), &actions);
    assert_eq!(
        walk.actions.len(),
        actions.len(),
        "the fixed model takes every step"
    );
    let last = walk.states.last().expect("a state");
    assert!(matches!(
        last.row.map(|r| r.status),
        Some(Status::Completed { .. })
    ));
    assert_eq!(replay(&bounds, &[walk]).await, Vec::<String>::new());
}

/// The replay tells a store from a model that disagrees with it: the
/// stores refuse the take-over that the defective model lets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_tells_the_defective_model_from_the_stores() {
    let mut bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute);
    bounds.stale_take_over = true;
    let walk = Walk::follow(
        &Protocol::new(bounds.clone()),
        &stale_take_over_counterexample(),
    );
    let divergences = replay(&bounds, &[walk]).await;
    assert_eq!(divergences.len(), STORES.len(), "{divergences:?}");
    for why in divergences {
        assert!(why.contains("take-over returned false"), "{why}");
    }
}

/// A sample of the paths the checker explores in lease mode under
/// `reject`, replayed on every store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_paths_under_reject_give_the_models_outcomes() {
    let bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reject);
    let sample = covering(&Protocol::new(bounds.clone()), 17, 400, 12, 60);
    sampled(&bounds, &sample).await;
}

/// The same under `reexecute`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_paths_under_reexecute_give_the_models_outcomes() {
    let bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute);
    let sample = covering(&Protocol::new(bounds.clone()), 29, 400, 12, 60);
    sampled(&bounds, &sample).await;
}

/// Replays a sample that makes every kind of store call with each of its
/// outcomes.
async fn sampled(bounds: &Bounds, sample: &[Walk]) {
    let covered: std::collections::BTreeSet<String> = sample.iter().flat_map(transitions).collect();
    println!("transitions in the sample: {covered:#?}");
    let mut expected = vec![
        "Claim -> Effect",
        "Claim -> TakeOver",
        "Claim -> respond replayed",
        "Claim -> respond InProgress",
        "Claim -> respond Reused",
        "TakeOver -> Effect",
        "Complete -> respond executed stored=true",
        "Release -> respond temporary",
        "trim Completed -> Tombstone",
        "trim Tombstone -> none",
    ];
    if bounds.expiry == ExpiryPolicy::Reject {
        expected.push("Claim -> respond Expired");
    }
    for transition in expected {
        assert!(
            covered.contains(transition),
            "the sample never makes {transition}"
        );
    }
    assert_eq!(replay(bounds, sample).await, Vec::<String>::new());
}
