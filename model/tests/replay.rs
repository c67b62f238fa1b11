//! The model's paths, replayed against the real stores: every store call
//! of a path must give the outcome the model gave, and after each step the
//! key's committed row must be the model's row (state, fingerprint, claim
//! token, and for a result the effect whose response it stores).
//!
//! - **Lease mode** through the server's `Records` trait (claim and the
//!   engine's `step` on what it read, take-over, complete, release, trim)
//!   on PostgreSQL, SQLite, a Redis node and a Redis Cluster.
//! - **Transactional mode** through `in_transaction` on PostgreSQL and
//!   SQLite: each server's request is one real call on its own connection,
//!   held at the model's points (in the effect until the model commits,
//!   rolls back or crashes it).
//!
//! Where a store cannot follow a path step for step, the path is cut
//! there (see [`followable`]): Redis forgets a record at its deadline
//! (`PEXPIREAT`) where the model waits for a trim, and keeps a result past
//! its window where the model makes it a tombstone (the same decisions);
//! a real transaction holds its row lock (SQLite: the write lock) from its
//! claim on and makes its claim and take-over in one go, where the model
//! lets another server read between them.
//!
//! Time is the store's: one model tick is `unit` of the database's clock.
//! Leases and windows last a quarter tick less than their ticks and the
//! retention half a tick more, so every comparison the store makes lands
//! a quarter tick away from a tick boundary, and the outcome is the
//! model's as long as each tick's calls finish within that quarter tick.
//! A replay that overruns it (a busy machine) starts again with a longer
//! tick; nothing here asserts how long anything took.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use idemkey::Db;
use idemkey::store::sqlx_postgres::{SqlxPgDb, sqlx_in_transaction};
use idemkey::store::{RedisSettings, StoreSettings};
use idemkey_core::{Decision, ExpiryPolicy, KeyProfile, OperationId, Stored, UnixMillis};
use idemkey_model::{
    ATTEMPTS, Action, Answer, Bounds, Mode, Phase, Protocol, Redo, Rejection, Row, State, Status,
    Walk, cover, fingerprint, transitions, walks,
};
use idemkey_server::idempotency::{
    self, Answer as EngineAnswer, ClaimToken, Claimed, NewClaim, Policy, Read, Record, RecordKey,
    Records as _, Scope, Step, StoredResponse, state_name,
};
use idemkey_server::in_transaction::{self, Outcome};
use idemkey_testkit::{PgCluster, RedisCluster, RedisNode};
use stateright::{Checker as _, HasDiscoveries, Model as _};
use tokio::sync::oneshot;

mod stores {
    use super::*;

    /// A store to replay against, kept alive (with its files or its Redis
    /// processes) while used.
    pub struct Target {
        pub url: String,
        /// Opened through the sqlx backend rather than the URL's default.
        pub sqlx: bool,
        /// What the store lives on: dropped (removed, killed) with it.
        _keep: Box<dyn std::any::Any + Send>,
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
            sqlx: false,
            _keep: Box::new(()),
        }
    }

    /// PostgreSQL through the sqlx backend.
    pub fn sqlx_postgres() -> Target {
        Target {
            sqlx: true,
            ..postgres()
        }
    }

    pub fn sqlite() -> Target {
        let dir = std::env::temp_dir().join(format!("idemkey-replay-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Target {
            url: format!("sqlite://{}", dir.join("records.db").display()),
            sqlx: false,
            _keep: Box::new(TempDir(dir)),
        }
    }

    pub fn redis() -> Target {
        let node = RedisNode::start().expect("start redis-server");
        Target {
            url: node.url(),
            sqlx: false,
            _keep: Box::new(node),
        }
    }

    pub fn redis_cluster() -> Target {
        let cluster = RedisCluster::start(3, 1).expect("start a Redis Cluster");
        Target {
            url: cluster.url(),
            sqlx: false,
            _keep: Box::new(cluster),
        }
    }
}

/// How a store forgets what is past its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forgets {
    /// `trim` makes a result past its window a tombstone and deletes
    /// tombstones and abandoned claims past retention (the SQL stores).
    ByTrim,
    /// Every record expires at its deadline, by itself (Redis: no
    /// tombstone, a result past its window stays until it expires, and
    /// `trim` does nothing).
    ByExpiry,
}

/// How the paths reach the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drive {
    /// Lease mode: each store call of the model is one call of `Records`.
    Records,
    /// Transactional mode: each request is one `in_transaction` call.
    InTransaction,
}

/// One store the paths run against.
struct Store {
    name: &'static str,
    open: fn() -> stores::Target,
    forgets: Forgets,
    drive: Drive,
}

/// Every store the lease mode's paths run against. A new backend of `Db`
/// is one line here.
const LEASE_STORES: [Store; 5] = [
    Store {
        name: "postgres",
        open: stores::postgres,
        forgets: Forgets::ByTrim,
        drive: Drive::Records,
    },
    Store {
        name: "sqlx-postgres",
        open: stores::sqlx_postgres,
        forgets: Forgets::ByTrim,
        drive: Drive::Records,
    },
    Store {
        name: "sqlite",
        open: stores::sqlite,
        forgets: Forgets::ByTrim,
        drive: Drive::Records,
    },
    Store {
        name: "redis",
        open: stores::redis,
        forgets: Forgets::ByExpiry,
        drive: Drive::Records,
    },
    Store {
        name: "redis-cluster",
        open: stores::redis_cluster,
        forgets: Forgets::ByExpiry,
        drive: Drive::Records,
    },
];

/// Every store the transactional mode's paths run against: the stores
/// `in_transaction` has.
const TRANSACTION_STORES: [Store; 3] = [
    Store {
        name: "postgres in_transaction",
        open: stores::postgres,
        forgets: Forgets::ByTrim,
        drive: Drive::InTransaction,
    },
    Store {
        name: "sqlx-postgres in_transaction",
        open: stores::sqlx_postgres,
        forgets: Forgets::ByTrim,
        drive: Drive::InTransaction,
    },
    Store {
        name: "sqlite in_transaction",
        open: stores::sqlite,
        forgets: Forgets::ByTrim,
        drive: Drive::InTransaction,
    },
];

/// The stores of a mode.
fn stores_of(mode: Mode) -> &'static [Store] {
    match mode {
        Mode::Lease => &LEASE_STORES,
        Mode::Transactional => &TRANSACTION_STORES,
    }
}

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

/// The row the store holds when the model's row is `state.row`: for a
/// store that forgets by expiry, the row after a trim at the state's clock
/// (the record expired at the deadline the trim would act on).
fn expected_row(protocol: &Protocol, forgets: Forgets, state: &State) -> Option<Row> {
    match forgets {
        Forgets::ByTrim => state.row,
        Forgets::ByExpiry => protocol
            .next_state(state, Action::Trim)
            .map_or(state.row, |trimmed| trimmed.row),
    }
}

/// How much of `walk` the store can follow step for step: the walk is cut
/// before the first step it cannot.
fn followable(protocol: &Protocol, store: &Store, walk: &Walk) -> Walk {
    let cut = walk.actions.iter().enumerate().position(|(i, &action)| {
        let (before, after) = (&walk.states[i], &walk.states[i + 1]);
        let taking_over = |except: Option<u8>| {
            (0u8..)
                .zip(&before.servers)
                .any(|(s, p)| Some(s) != except && matches!(p, Phase::TakeOver { .. }))
        };
        let expiry = store.forgets == Forgets::ByExpiry
            && match action {
                // The record expired; the model's row waits for a trim.
                Action::Step(_) => {
                    before.row.is_some() && expected_row(protocol, store.forgets, before).is_none()
                }
                // The model's row changes under a take-over; the record
                // does not (no trim).
                Action::Trim => taking_over(None),
                _ => false,
            };
        let transaction = store.drive == Drive::InTransaction
            && match action {
                Action::Step(server) => {
                    let s = usize::from(server);
                    let acquiring = matches!(
                        before.servers[s],
                        Phase::Claim { .. } | Phase::TakeOver { .. }
                    );
                    // The real claim waits for another transaction's
                    // lock, or for a take-over decided but not yet made
                    // (the real one makes its claim and take-over at once).
                    let blocked = acquiring
                        && (before.lock.is_some_and(|holder| holder != server)
                            || taking_over(Some(server)));
                    // A take-over that found the row changed: the real
                    // one never leaves the row between the two.
                    let retried = matches!(before.servers[s], Phase::TakeOver { .. })
                        && matches!(after.servers[s], Phase::Claim { .. });
                    blocked || retried
                }
                // A trim skips (PostgreSQL) or waits for (SQLite) the
                // row a real take-over already holds.
                Action::Trim => taking_over(None),
                _ => false,
            };
        expiry || transaction
    });
    walk.prefix(cut.unwrap_or(walk.actions.len()))
}

/// What a transaction's effect does when the model says.
enum Finish {
    /// Answer 201 with the claim's model token as the body: commit.
    Commit(u8),
    /// Answer a temporary status: roll back, store nothing.
    Temporary,
    /// Fail: roll back (a server that crashed).
    Crash,
}

/// One request's real `in_transaction` call, held inside its effect.
struct Session {
    /// Fires when the effect starts (the key is held).
    entered: oneshot::Receiver<()>,
    /// Whether `entered` fired.
    in_effect: bool,
    /// Tells the effect how to end.
    finish: Option<oneshot::Sender<Finish>>,
    /// The call.
    done: tokio::task::JoinHandle<Result<Outcome, in_transaction::Error<String>>>,
}

/// Where transactional requests get their connections.
enum Connections {
    Postgres(idemkey::store::postgres::PgDb),
    /// Each call in a transaction of the caller's own on the sqlx pool.
    Sqlx(SqlxPgDb),
    /// The store (its table names) and its file.
    Sqlite(idemkey::store::sqlite::SqliteDb, std::path::PathBuf),
    /// Lease mode: none.
    None,
}

/// The effect's answer for `finish`.
fn effect_answer(
    finish: Result<Finish, oneshot::error::RecvError>,
) -> Result<StoredResponse, String> {
    match finish {
        Ok(Finish::Commit(token)) => Ok(StoredResponse::new(201, token.to_string())),
        Ok(Finish::Temporary) => Ok(StoredResponse::new(503, "temporary")),
        Ok(Finish::Crash) | Err(_) => Err("the server crashed".to_owned()),
    }
}

struct Replay<'a> {
    db: &'a Db,
    store: &'a Store,
    protocol: &'a Protocol,
    bounds: &'a Bounds,
    key: RecordKey,
    unit: Duration,
    /// The store's clock at tick 0.
    base: UnixMillis,
    /// The real claim token of each model claim token (lease mode: every
    /// claim; transactional mode: learned at each commit).
    tokens: HashMap<u8, ClaimToken>,
    /// The real claim of each model claim token (lease mode).
    claims: HashMap<u8, NewClaim>,
    /// The row each server's take-over was decided on, as the store read it.
    previous: HashMap<u8, Record>,
    /// Transactional mode: each server's call in progress.
    sessions: HashMap<u8, Session>,
    connections: &'a Connections,
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
                    // Redis keeps the result past its window (the same
                    // decisions as a tombstone's).
                    Status::Tombstone if self.store.forgets == Forgets::ByExpiry => "completed",
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
                    self.tokens.get(&row.token) == Some(&record.token),
                    "{context}: the row's claim is not the model's"
                );
                if matches!(row.status, Status::Completed { .. }) {
                    let body = record.response.as_ref().and_then(|r| r.body.as_deref());
                    ensure!(
                        body == Some(row.token.to_string().as_bytes()),
                        "{context}: the row stores another effect's response than the model's {}",
                        row.token
                    );
                }
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
            replay_ttl: self.duration(self.bounds.window, -1),
        };
        self.claims.insert(model_token, claim);
        self.tokens.insert(model_token, claim.token);
        claim
    }

    /// Runs one action of the model against the store; `before` and
    /// `after` are the model's states around it.
    async fn act(&mut self, before: &State, action: Action, after: &State) -> Result<(), Stop> {
        let context = format!("{action:?} at tick {}", before.clock);
        match action {
            Action::Step(server) if self.store.drive == Drive::InTransaction => {
                self.step_in_transaction(before, server, after, &context)
                    .await
            }
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
            // A transaction's effect ends when the model says: a temporary
            // status rolls it back; a crash does too.
            Action::Effect { server, ok: false } if self.store.drive == Drive::InTransaction => {
                let outcome = self.end_session(server, Finish::Temporary).await;
                ensure!(
                    matches!(outcome, Ok(Outcome::NotStored(ref r)) if r.status == 503),
                    "{context}: a temporary status gave {outcome:?}, the model rolls back"
                );
                Ok(())
            }
            Action::Crash(server) if self.sessions.contains_key(&server) => {
                let outcome = self.end_session(server, Finish::Crash).await;
                ensure!(
                    matches!(outcome, Err(in_transaction::Error::Effect(_))),
                    "{context}: a crash in the effect gave {outcome:?}, the model rolls back"
                );
                Ok(())
            }
            // The network, crashes outside a transaction and the lease
            // mode's effect never reach the store.
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
            Phase::Claim { client, changes } => {
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
                Self::same_step(&step, (client, changes), next, context)?;
                if let Step::TakeOver(_, record) = step {
                    self.previous.insert(server, record);
                }
            }
            Phase::TakeOver { token, .. } => {
                let previous = self.previous.remove(&server).expect("a decision");
                let claim = self.claims[&token];
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
                        self.tokens[&token],
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
                    .release(&self.key, self.tokens[&token])
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

    /// Starts server `server`'s real call for a request with `payload`.
    async fn start_session(&mut self, server: u8, payload: u8) {
        let (entered_tx, entered) = oneshot::channel();
        let (finish, finish_rx) = oneshot::channel::<Finish>();
        let options = in_transaction::Options {
            expiry_policy: self.bounds.expiry,
            ..in_transaction::Options::new(self.duration(self.bounds.window, -1))
        };
        let key = self.key.clone();
        let done = match self.connections {
            Connections::Postgres(store) => {
                let store = store.clone();
                tokio::spawn(async move {
                    idemkey::store::postgres::pg_in_transaction(
                        &store,
                        &key,
                        fingerprint(payload),
                        &options,
                        move |_tx| {
                            Box::pin(async move {
                                let _ = entered_tx.send(());
                                effect_answer(finish_rx.await)
                            })
                        },
                    )
                    .await
                })
            }
            Connections::Sqlx(store) => {
                let store = store.clone();
                tokio::spawn(async move {
                    // The caller's transaction: committed when the call's
                    // effect and record are its result, as a service would.
                    let mut tx = store.pool().begin().await.expect("begin");
                    let outcome = sqlx_in_transaction(
                        &store,
                        &mut tx,
                        &key,
                        fingerprint(payload),
                        &options,
                        move |_tx| {
                            Box::pin(async move {
                                let _ = entered_tx.send(());
                                effect_answer(finish_rx.await)
                            })
                        },
                    )
                    .await;
                    if matches!(outcome, Ok(Outcome::Executed(_))) {
                        tx.commit().await.expect("commit");
                    } else {
                        tx.rollback().await.expect("roll back");
                    }
                    outcome
                })
            }
            Connections::Sqlite(lite, path) => {
                // A connection of its own: the transaction holds it (and
                // the write lock) until the model ends it.
                let conn = rusqlite::Connection::open(path).expect("open SQLite");
                conn.busy_timeout(Duration::from_secs(10))
                    .expect("busy timeout");
                tokio::spawn(idemkey::store::sqlite::sqlite_in_transaction_async(
                    lite,
                    Arc::new(parking_lot::Mutex::new(conn)),
                    key,
                    fingerprint(payload),
                    options,
                    move |_tx| {
                        let _ = entered_tx.send(());
                        effect_answer(finish_rx.blocking_recv())
                    },
                ))
            }
            Connections::None => unreachable!("lease mode starts no transaction"),
        };
        self.sessions.insert(
            server,
            Session {
                entered,
                in_effect: false,
                finish: Some(finish),
                done,
            },
        );
    }

    /// Waits until server `server`'s call holds the key (`true`: in its
    /// effect) or has answered (`false`: the effect was dropped unrun).
    /// The minute only guards against a call that waits for a lock the
    /// walk never releases (a path [`followable`] should have cut).
    async fn settle(&mut self, server: u8) -> bool {
        let session = self.sessions.get_mut(&server).expect("a call");
        if !session.in_effect {
            let entered = tokio::time::timeout(Duration::from_secs(60), &mut session.entered).await;
            session.in_effect = entered.expect("the call waits on a lock").is_ok();
        }
        session.in_effect
    }

    /// Ends server `server`'s call as `finish` says and returns its answer.
    async fn end_session(
        &mut self,
        server: u8,
        finish: Finish,
    ) -> Result<Outcome, in_transaction::Error<String>> {
        let mut session = self.sessions.remove(&server).expect("a call");
        if let Some(tx) = session.finish.take() {
            let _ = tx.send(finish);
        }
        session.done.await.expect("the call's task")
    }

    /// Transactional mode: the model's store step of `server`, on its real
    /// `in_transaction` call.
    async fn step_in_transaction(
        &mut self,
        before: &State,
        server: u8,
        after: &State,
        context: &str,
    ) -> Result<(), Stop> {
        let next = after.servers[usize::from(server)];
        match before.servers[usize::from(server)] {
            Phase::Claim { client, .. } => {
                if !self.sessions.contains_key(&server) {
                    let payload = before.clients[usize::from(client)].payload;
                    self.start_session(server, payload).await;
                }
                let holds = self.settle(server).await;
                match next {
                    // A take-over: the real call makes it at once.
                    Phase::Effect { .. } | Phase::TakeOver { .. } => ensure!(
                        holds,
                        "{context}: the call answered, the model went to {next:?}"
                    ),
                    Phase::Respond { answer, .. } => {
                        ensure!(
                            !holds,
                            "{context}: the call runs its effect, the model answers {answer:?}"
                        );
                        let outcome = self.end_session(server, Finish::Crash).await;
                        same_answer(&outcome, answer, context)?;
                    }
                    other => {
                        return Err(Stop::Diverged(format!(
                            "{context}: the model went to {other:?}"
                        )));
                    }
                }
            }
            Phase::TakeOver { .. } => {
                let holds = self.settle(server).await;
                ensure!(
                    holds && matches!(next, Phase::Effect { .. }),
                    "{context}: the call holds the key: {holds}, the model went to {next:?}"
                );
            }
            Phase::Complete { token, .. } => {
                let outcome = self.end_session(server, Finish::Commit(token)).await;
                let Phase::Respond { answer, .. } = next else {
                    return Err(Stop::Diverged(format!(
                        "{context}: the model's commit went to {next:?}"
                    )));
                };
                same_answer(&outcome, answer, context)?;
                // The committed row's claim is the engine's own.
                if let Some(record) = self.read().await.record {
                    self.tokens.insert(token, record.token);
                }
            }
            other => {
                return Err(Stop::Diverged(format!(
                    "{context}: {other:?} makes no call in a transaction"
                )));
            }
        }
        Ok(())
    }

    /// The engine's `step` on the store's read is the model's next phase;
    /// `(client, changes)` is the request that claimed and how many claims
    /// found the row changed before this one.
    fn same_step(
        step: &Step,
        (client, changes): (u8, u8),
        next: Phase,
        context: &str,
    ) -> Result<(), Stop> {
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
            // The engine found nothing to decide on (the row changed
            // under the claim): it claims again, and answers 503 (the
            // key's record kept changing) once `ATTEMPTS` claims found
            // it so. The model must have done the same, not answered.
            (Step::Claim, next) => {
                let expected = if changes + 1 < ATTEMPTS {
                    Phase::Claim {
                        client,
                        changes: changes + 1,
                    }
                } else {
                    Phase::Respond {
                        client,
                        answer: Answer::Unavailable,
                    }
                };
                ensure!(
                    next == expected,
                    "{context}: the engine claims again after claim {} of {ATTEMPTS} (503 after \
                     the last), the model went to {next:?}",
                    changes + 1
                );
            }
            (step, next) => {
                return Err(Stop::Diverged(format!(
                    "{context}: the engine chose {step:?}, the model {next:?}"
                )));
            }
        }
        Ok(())
    }
}

/// A transactional call's answer is the model's.
fn same_answer(
    outcome: &Result<Outcome, in_transaction::Error<String>>,
    answer: Answer,
    context: &str,
) -> Result<(), Stop> {
    let body = |r: &StoredResponse| r.body.as_deref().map(<[u8]>::to_vec);
    let same = match (outcome, answer) {
        (
            Ok(Outcome::Executed(r)),
            Answer::Executed {
                effect,
                stored: true,
            },
        ) => body(r) == Some(effect.to_string().into_bytes()),
        (Ok(Outcome::Replayed(r)), Answer::Replayed { effect }) => {
            body(r) == Some(effect.to_string().into_bytes())
        }
        (Ok(Outcome::Rejected(problem)), Answer::Rejected(rejection)) => {
            let status = match rejection {
                Rejection::InProgress => 409,
                Rejection::Reused => 422,
                Rejection::Expired => 410,
            };
            problem.status() == status
        }
        _ => false,
    };
    ensure!(
        same,
        "{context}: the call answered {outcome:?}, the model {answer:?}"
    );
    Ok(())
}

/// Replays `walk` on `db`, with ticks of `unit`.
async fn replay_once(
    db: &Db,
    store: &Store,
    connections: &Connections,
    bounds: &Bounds,
    walk: &Walk,
    unit: Duration,
) -> Result<(), Stop> {
    let key = RecordKey {
        scope: Scope::new("replay").expect("a scope"),
        operation: OPERATION,
        key: idemkey_core::IdempotencyKey::parse(
            uuid::Uuid::new_v4().to_string().as_bytes(),
            KeyProfile::Lenient,
        )
        .expect("a key"),
    };
    let protocol = Protocol::new(bounds.clone());
    let mut replay = Replay {
        db,
        store,
        protocol: &protocol,
        bounds,
        key,
        unit,
        base: UnixMillis(0),
        tokens: HashMap::new(),
        claims: HashMap::new(),
        previous: HashMap::new(),
        sessions: HashMap::new(),
        connections,
    };
    replay.base = replay.read().await.now;
    let result = async {
        for (i, &action) in walk.actions.iter().enumerate() {
            let (before, after) = (&walk.states[i], &walk.states[i + 1]);
            replay.act(before, action, after).await?;
            let read = replay.read().await;
            replay.on_time(&read, after.clock)?;
            let context = format!("after step {i} ({action:?})");
            let model = expected_row(replay.protocol, store.forgets, after);
            replay.same_row(read.record.as_ref(), model, &context)?;
        }
        Ok(())
    }
    .await;
    // Calls the walk left open roll back.
    for server in replay.sessions.keys().copied().collect::<Vec<_>>() {
        let _ = replay.end_session(server, Finish::Crash).await;
    }
    result
}

/// Opens `target` for a replay whose retention is `retention` (Redis sets
/// each record's expiry from it).
async fn open(target: &stores::Target, retention: Duration) -> Db {
    let redis = RedisSettings {
        retention,
        ..RedisSettings::default()
    };
    let settings = StoreSettings {
        redis,
        ..StoreSettings::default()
    };
    if target.sqlx {
        let db = Db::new(
            SqlxPgDb::connect(&target.url, &settings)
                .await
                .expect("open the sqlx store"),
        );
        db.migrate().await.expect("migrate");
        return db;
    }
    Db::open(&target.url, &settings)
        .await
        .expect("open the store")
}

/// Replays each walk on `store` (cut to what it can follow), lengthening
/// the tick when a busy machine makes a replay overrun it, and returns the
/// divergences.
async fn replay_on(store: &Store, bounds: &Bounds, walks: &[Walk]) -> Vec<String> {
    let name = store.name;
    let target = (store.open)();
    let mut divergences = Vec::new();
    let mut dbs: HashMap<Duration, Db> = HashMap::new();
    for (n, walk) in walks.iter().enumerate() {
        let mut unit = Duration::from_millis(100);
        loop {
            let retention = Duration::from_millis(
                u64::try_from(unit.as_millis()).expect("short") * u64::from(bounds.retention)
                    + u64::try_from(unit.as_millis()).expect("short") / 2,
            );
            if let std::collections::hash_map::Entry::Vacant(slot) = dbs.entry(unit) {
                slot.insert(open(&target, retention).await);
            }
            let db = &dbs[&unit];
            let connections = match (
                store.drive,
                db.backend_as::<idemkey::store::postgres::PgDb>(),
                db.backend_as::<idemkey::store::sqlite::SqliteDb>(),
            ) {
                (Drive::InTransaction, Some(pg), _) => Connections::Postgres(pg.clone()),
                (Drive::InTransaction, None, None) if target.sqlx => Connections::Sqlx(
                    db.backend_as::<SqlxPgDb>()
                        .expect("the sqlx backend")
                        .clone(),
                ),
                (Drive::InTransaction, _, Some(lite)) => Connections::Sqlite(
                    lite.clone(),
                    target
                        .url
                        .strip_prefix("sqlite://")
                        .expect("a SQLite URL")
                        .into(),
                ),
                (Drive::InTransaction, ..) => unreachable!("in_transaction needs a SQL store"),
                (Drive::Records, ..) => Connections::None,
            };
            match replay_once(db, store, &connections, bounds, walk, unit).await {
                Ok(()) => break,
                Err(Stop::Overran) if unit < Duration::from_secs(6) => {
                    println!("{name}, walk {n}: overran a {unit:?} tick, replayed at twice that");
                    unit *= 2;
                }
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
    divergences
}

/// Replays each walk on every store of its mode, each cut to what the
/// store can follow; returns the divergences.
async fn replay(bounds: &Bounds, walks: &[Walk]) -> Vec<String> {
    let protocol = Protocol::new(bounds.clone());
    let mut divergences = Vec::new();
    for store in stores_of(bounds.mode) {
        let cut: Vec<Walk> = walks
            .iter()
            .map(|w| followable(&protocol, store, w))
            .collect();
        divergences.extend(replay_on(store, bounds, &cut).await);
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
    let protocol = Protocol::new(bounds.clone());
    for store in &LEASE_STORES {
        assert_eq!(
            followable(&protocol, store, &walk).actions.len(),
            walk.actions.len(),
            "{} follows the whole counterexample",
            store.name
        );
    }
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
    assert_eq!(divergences.len(), LEASE_STORES.len(), "{divergences:?}");
    for why in divergences {
        assert!(why.contains("take-over returned false"), "{why}");
    }
}

/// A sample of the paths the checker explores in lease mode under
/// `reject`, replayed on every store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_paths_under_reject_give_the_models_outcomes() {
    sampled(Bounds::small(Mode::Lease, ExpiryPolicy::Reject), 17).await;
}

/// The same under `reexecute`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_paths_under_reexecute_give_the_models_outcomes() {
    sampled(Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute), 29).await;
}

/// The transactional mode's paths under `reject`, on `in_transaction`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_paths_under_reject_give_the_models_outcomes() {
    sampled(Bounds::small(Mode::Transactional, ExpiryPolicy::Reject), 17).await;
}

/// The same under `reexecute`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_paths_under_reexecute_give_the_models_outcomes() {
    sampled(
        Bounds::small(Mode::Transactional, ExpiryPolicy::Reexecute),
        29,
    )
    .await;
}

/// What a sample must do: every kind of store call with each of its
/// outcomes that the mode and the policy have.
fn expected_transitions(bounds: &Bounds) -> Vec<&'static str> {
    let mut expected = vec![
        "Claim -> Effect",
        "Claim -> respond replayed",
        "Claim -> respond Reused",
        "Complete -> respond executed stored=true",
        "trim Completed -> Tombstone",
        "trim Tombstone -> none",
    ];
    match bounds.mode {
        Mode::Lease => expected.extend([
            "Claim -> TakeOver",
            "TakeOver -> Effect",
            "Claim -> respond InProgress",
            "Release -> respond temporary",
        ]),
        // A claim is never visible before its commit: nothing is taken
        // over but a result past its window, and nothing is released.
        Mode::Transactional if bounds.expiry == ExpiryPolicy::Reexecute => {
            expected.extend(["Claim -> TakeOver", "TakeOver -> Effect"]);
        }
        Mode::Transactional => {}
    }
    if bounds.expiry == ExpiryPolicy::Reject {
        expected.push("Claim -> respond Expired");
    }
    expected
}

/// For each store of the mode: a sample of seeded random paths, cut to
/// what the store can follow, that makes every expected transition;
/// replayed, it gives the model's outcomes.
async fn sampled(bounds: Bounds, seed: u64) {
    let protocol = Protocol::new(bounds.clone());
    let pool = walks(&protocol, seed, 400, 60);
    let mut divergences = Vec::new();
    for store in stores_of(bounds.mode) {
        let cut = pool
            .iter()
            .map(|w| followable(&protocol, store, w))
            .collect();
        let sample = cover(cut, 12);
        let covered: std::collections::BTreeSet<String> =
            sample.iter().flat_map(transitions).collect();
        println!("{}: transitions in the sample: {covered:#?}", store.name);
        for transition in expected_transitions(&bounds) {
            assert!(
                covered.contains(transition),
                "{}: the sample never makes {transition}",
                store.name
            );
        }
        if bounds.mode == Mode::Transactional {
            // The effect's own ends of a transaction: a temporary status
            // and a crash, each rolling back a held key.
            let ends = |end: &dyn Fn(Action, &State) -> bool| {
                sample.iter().any(|w| {
                    w.actions
                        .iter()
                        .zip(&w.states)
                        .any(|(&action, before)| end(action, before))
                })
            };
            assert!(
                ends(&|a, _| matches!(a, Action::Effect { ok: false, .. })),
                "{}: the sample never rolls back a temporary status",
                store.name
            );
            assert!(
                ends(&|a, before| matches!(a, Action::Crash(s) if before.lock == Some(s))),
                "{}: the sample never crashes a server holding the key",
                store.name
            );
        }
        divergences.extend(replay_on(store, &bounds, &sample).await);
    }
    assert_eq!(divergences, Vec::<String>::new());
}
