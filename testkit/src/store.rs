//! One test's store: a throwaway PostgreSQL database or SQLite file
//! ([`TestDb`]), a Redis node or cluster ([`RedisStore`]), and what tests
//! read and change in them behind the library's back: records aged as if
//! the database's clock had moved on, records counted, a state waited for.
//! Shared by the library's tests and the order service's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{PgBouncer, PgBouncerOptions, PgCluster, PgOptions, RedisCluster, RedisNode};

/// Numbers the SQLite files of this process's tests.
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A throwaway PostgreSQL cluster.
    Postgres,
    /// An SQLite file in a temporary directory.
    Sqlite,
}

/// Where a test's cluster comes from.
enum Cluster {
    Shared(&'static PgCluster),
    Own(Box<PgCluster>),
    /// The SQLite file's directory, removed on drop.
    File(std::path::PathBuf),
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Cluster::File(dir) = &self.cluster {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One test's database: its backend, its name (the SQLite file's path) and
/// its URL.
pub struct TestDb {
    /// The store it is.
    pub backend: Backend,
    cluster: Cluster,
    /// The database's name on its cluster, or the SQLite file's path.
    pub db: String,
    /// The URL the library opens.
    pub url: String,
}

impl TestDb {
    /// A fresh database on the process's shared cluster.
    pub fn new(backend: Backend) -> Self {
        if backend == Backend::Sqlite {
            let dir = std::env::temp_dir().join(format!(
                "idemkey-test-{}-{}-{}",
                std::process::id(),
                NEXT_FILE.fetch_add(1, Ordering::Relaxed),
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |t| t.as_nanos())
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let file = dir.join("idemkey.db");
            return Self {
                backend,
                url: format!("sqlite://{}", file.display()),
                db: file.display().to_string(),
                cluster: Cluster::File(dir),
            };
        }
        let cluster = PgCluster::shared().expect("start PostgreSQL");
        let db = cluster.fresh_database().expect("create database");
        Self {
            backend,
            cluster: Cluster::Shared(cluster),
            db: db.name,
            url: db.url,
        }
    }

    /// A fresh database on a cluster of its own, which the test may stop
    /// and restart.
    pub fn with_own_cluster(backend: Backend, options: PgOptions) -> Self {
        let cluster = PgCluster::start_with(options).expect("start PostgreSQL");
        let url = cluster.create_database("idemkey").expect("create database");
        Self {
            backend,
            cluster: Cluster::Own(Box::new(cluster)),
            db: "idemkey".into(),
            url,
        }
    }

    /// The cluster (for reading its log, say).
    pub fn cluster(&self) -> &PgCluster {
        match &self.cluster {
            Cluster::Shared(c) => c,
            Cluster::Own(c) => c,
            Cluster::File(_) => panic!("no cluster under SQLite"),
        }
    }

    /// The cluster, to stop or restart it (own clusters only).
    pub fn cluster_mut(&mut self) -> &mut PgCluster {
        match &mut self.cluster {
            Cluster::Shared(_) | Cluster::File(_) => panic!("no cluster of this test's own"),
            Cluster::Own(c) => c,
        }
    }

    /// Runs SQL and returns its unaligned output.
    pub fn sql(&self, sql: &str) -> String {
        if self.backend == Backend::Sqlite {
            return sqlite_query(&self.db, sql);
        }
        self.cluster().psql(&self.db, sql).expect("psql")
    }

    /// Rows in `table`.
    pub fn count(&self, table: &str) -> u64 {
        self.sql(&format!("SELECT count(*) FROM {table}"))
            .parse()
            .expect("a count")
    }
}

/// A fresh PostgreSQL database behind a throwaway PgBouncer in transaction
/// pooling mode: what a deployment behind a pooler looks like to the
/// library.
pub struct BouncedDb {
    /// The database; its URL goes through PgBouncer, its SQL
    /// ([`TestDb::sql`]) straight to PostgreSQL.
    pub db: TestDb,
    /// PgBouncer, stopped when dropped.
    pub bouncer: PgBouncer,
}

impl BouncedDb {
    /// A database on the shared cluster and a PgBouncer with `pool` server
    /// connections in front. With `role_timeouts`, the role's
    /// `lock_timeout` (2 s) and `statement_timeout` (5 s) are set on
    /// PostgreSQL, as behind a pooler they must be (docs/pgbouncer.md).
    pub fn start(pool: u32, role_timeouts: bool) -> Self {
        let mut db = TestDb::new(Backend::Postgres);
        if role_timeouts {
            db.sql(&format!(
                "ALTER ROLE postgres IN DATABASE \"{name}\" SET lock_timeout = '2s';
                 ALTER ROLE postgres IN DATABASE \"{name}\" SET statement_timeout = '5s';",
                name = db.db
            ));
        }
        let bouncer = PgBouncer::start_with(db.cluster(), PgBouncerOptions::new().pool_size(pool))
            .expect("start pgbouncer");
        db.url = bouncer.url(&db.db);
        Self { db, bouncer }
    }
}

/// Runs one query on an SQLite file and prints it as psql -A -t would.
fn sqlite_query(path: &str, sql: &str) -> String {
    let conn = rusqlite::Connection::open(path).expect("open sqlite");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    let mut stmt = conn.prepare(sql).expect("prepare");
    let columns = stmt.column_count();
    let rows = stmt
        .query_map([], |row| {
            let mut cells = Vec::new();
            for i in 0..columns {
                use rusqlite::types::ValueRef;
                cells.push(match row.get_ref(i)? {
                    ValueRef::Null => String::new(),
                    ValueRef::Integer(n) => n.to_string(),
                    ValueRef::Real(x) => x.to_string(),
                    ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    ValueRef::Blob(b) => format!("{b:02x?}"),
                });
            }
            Ok(cells.join("|"))
        })
        .expect("query")
        .collect::<Result<Vec<_>, _>>()
        .expect("rows");
    rows.join("\n")
}
/// Whether `url` names a Redis node or cluster (every scheme the library
/// opens as Redis starts so).
fn is_redis(url: &str) -> bool {
    url.starts_with("redis")
}

/// Moves every idempotency record of the database at `url` back in time by
/// `by`, as if that much time had passed on the database's clock (which
/// decides leases and windows).
pub async fn age_records(url: &str, by: Duration) {
    let ms = i64::try_from(by.as_millis()).expect("fits");
    if is_redis(url) {
        redis_on_masters(url, AGE_REDIS_RECORDS, ms).await;
        return;
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        let conn = rusqlite::Connection::open(path).expect("open sqlite");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        conn.execute(
            "UPDATE idempotency_records SET created_at = created_at - ?1, \
             lease_until = lease_until - ?1, replay_until = replay_until - ?1",
            [ms],
        )
        .expect("age records");
        return;
    }
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    client
        .execute(
            "UPDATE idempotency_records SET created_at = created_at - $1::int8 * interval '1 ms', \
             lease_until = lease_until - $1 * interval '1 ms', \
             replay_until = replay_until - $1 * interval '1 ms', \
             check_at = check_at - $1 * interval '1 ms'",
            &[&ms],
        )
        .await
        .expect("age records");
    drop(client);
    let _ = task.await;
}

/// How many idempotency records the database at `url` holds.
pub async fn count_records(url: &str) -> i64 {
    if is_redis(url) {
        return redis_on_masters(url, COUNT_REDIS_RECORDS, 0).await;
    }
    count(url, "SELECT count(*) FROM idempotency_records").await
}

/// How many idempotency records of the database at `url` are in flight (a
/// claim not yet completed): how a test knows a request is under way.
pub async fn count_in_flight(url: &str) -> i64 {
    if is_redis(url) {
        return redis_on_masters(url, COUNT_REDIS_IN_FLIGHT, 0).await;
    }
    count(
        url,
        "SELECT count(*) FROM idempotency_records WHERE status = 'in_flight'",
    )
    .await
}

/// The one number `sql` selects from the database at `url`.
async fn count(url: &str, sql: &str) -> i64 {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let conn = rusqlite::Connection::open(path).expect("open sqlite");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        return conn.query_row(sql, [], |row| row.get(0)).expect("count");
    }
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    let n = client.query_one(sql, &[]).await.expect("count").get(0);
    drop(client);
    let _ = task.await;
    n
}

/// Waits until `done` says a state was reached, polling: tests sequence on
/// what happened, never on how long it took. The minute is only a guard
/// against hanging forever; reaching it fails the test.
pub async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let guard = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < guard, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Moves every record of a Redis node back by ARGV[1] ms: its times and its
/// expiry, as if that much time had passed on the node's clock. Answers how
/// many records it moved.
const AGE_REDIS_RECORDS: &str = r"
local by = tonumber(ARGV[1])
local keys = redis.call('KEYS', 'idemkey:*')
for _, k in ipairs(keys) do
  for _, f in ipairs({'created', 'lease_until', 'replay_until'}) do
    local v = redis.call('HGET', k, f)
    if v then redis.call('HSET', k, f, string.format('%.0f', tonumber(v) - by)) end
  end
  local at = redis.call('PEXPIRETIME', k)
  if at > 0 then redis.call('PEXPIREAT', k, string.format('%.0f', at - by)) end
end
return #keys
";

/// How many records a Redis node holds.
const COUNT_REDIS_RECORDS: &str = r"return #redis.call('KEYS', 'idemkey:*')";

/// How many records of a Redis node are in flight.
const COUNT_REDIS_IN_FLIGHT: &str = r"
local n = 0
for _, k in ipairs(redis.call('KEYS', 'idemkey:*')) do
  if redis.call('HGET', k, 'status') == 'in_flight' then n = n + 1 end
end
return n
";

/// Runs a test script on every master of the Redis node or cluster at
/// `url` (one connection per node: records live on the master owning their
/// slot) and sums the answers.
async fn redis_on_masters(url: &str, script: &str, arg: i64) -> i64 {
    let nodes: Vec<String> = match url.strip_prefix("redis+cluster://") {
        Some(seeds) => seeds.split(',').map(|s| format!("redis://{s}")).collect(),
        None => vec![url.to_owned()],
    };
    let mut total = 0;
    for node in nodes {
        let client = redis::Client::open(node.as_str()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis");
        let role: Vec<redis::Value> = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .expect("ROLE");
        if role.first() != Some(&redis::Value::BulkString(b"master".to_vec())) {
            continue;
        }
        let n: i64 = redis::Script::new(script)
            .arg(arg)
            .invoke_async(&mut conn)
            .await
            .expect("run the test script");
        total += n;
    }
    total
}

/// A Redis store of one test's own: a node, or a 3-master cluster with a
/// replica each. Killed when dropped.
pub enum RedisStore {
    /// One node.
    Node(RedisNode),
    /// A cluster.
    Cluster(RedisCluster),
}

impl RedisStore {
    /// A fresh node.
    pub fn node() -> Self {
        Self::Node(RedisNode::start().expect("start redis-server"))
    }

    /// A fresh cluster of 3 masters and 3 replicas.
    pub fn cluster() -> Self {
        Self::Cluster(RedisCluster::start(3, 1).expect("start a Redis Cluster"))
    }

    /// Its URL.
    pub fn url(&self) -> String {
        match self {
            Self::Node(n) => n.url(),
            Self::Cluster(c) => c.url(),
        }
    }
}

/// Every store the idempotency Layer runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyBackend {
    /// An SQLite file in a temporary directory.
    Sqlite,
    /// A database on the shared PostgreSQL cluster.
    Postgres,
    /// A Redis node of the test's own.
    Redis,
    /// A Redis Cluster of the test's own.
    RedisCluster,
}

/// One test's store on any backend: its URL, and whatever must live as
/// long as it (removed or stopped when dropped).
pub struct AnyDb {
    /// The URL the library opens.
    pub url: String,
    _db: Option<TestDb>,
    _redis: Option<RedisStore>,
}

impl AnyDb {
    /// A fresh store on `backend`.
    pub fn new(backend: AnyBackend) -> Self {
        let (db, redis) = match backend {
            AnyBackend::Sqlite => (Some(TestDb::new(Backend::Sqlite)), None),
            AnyBackend::Postgres => (Some(TestDb::new(Backend::Postgres)), None),
            AnyBackend::Redis => (None, Some(RedisStore::node())),
            AnyBackend::RedisCluster => (None, Some(RedisStore::cluster())),
        };
        let url = match (&db, &redis) {
            (Some(db), _) => db.url.clone(),
            (None, Some(redis)) => redis.url(),
            (None, None) => unreachable!("every backend makes a store"),
        };
        Self {
            url,
            _db: db,
            _redis: redis,
        }
    }
}
