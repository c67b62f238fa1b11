//! Throwaway PostgreSQL clusters (and Redis servers and clusters, see
//! [`RedisNode`] and [`RedisCluster`], and PgBouncer, see [`PgBouncer`]) for
//! idemkey's integration tests.
//!
//! This crate is dev-only (`publish = false`). It drives the machine's
//! PostgreSQL server binaries (`initdb`, `pg_ctl`, `psql`, `createdb`) with
//! plain [`std::process`], so any test crate can use it whatever its async
//! runtime.
//!
//! * [`PgCluster::start`] creates a private cluster in a fresh temporary
//!   directory, listening on `127.0.0.1` on a free port (and on a Unix socket
//!   in its own directory). Dropping it stops the server and removes the
//!   directory. Use it for tests that stop, crash or reconfigure the server.
//! * [`PgCluster::shared`] is a lazily started cluster shared by every test of
//!   the current process; combine it with [`PgCluster::fresh_database`] when a
//!   test only needs an empty database of its own.
//!
//! Every cluster also gets a watchdog (a tiny `sh` loop in its own process
//! group) that stops the server and removes its temporary directory once the
//! process that started it has gone, so no `postgres` process outlives a test
//! binary, even one that is killed or never drops its cluster.
//!
//! When the current user is root, the server binaries run as the `postgres`
//! OS user through `runuser` (initdb refuses to run as root); the clients
//! (`psql`, `createdb`) run as the current user and connect as the database
//! role `postgres` with `trust` authentication.
//!
//! The binaries are looked up in `$IDEMKEY_PG_BIN`, then
//! [`DEFAULT_BIN_DIR`], then the newest `/usr/lib/postgresql/*/bin`, then
//! `pg_config --bindir`. To save the ~1 s that `initdb` takes, each new
//! cluster is copied from a template data directory that is created once per
//! PostgreSQL version under the temporary directory
//! (`idemkey-pg-template-*`).
//!
//! # Example
//!
//! ```no_run
//! use idemkey_testkit::{PgCluster, PgOptions};
//!
//! # fn main() -> std::io::Result<()> {
//! // A database of its own on the process-wide cluster.
//! let db = PgCluster::shared()?.fresh_database()?;
//! println!("connect to {}", db.url);
//!
//! // A private cluster that the test may crash and restart.
//! let mut pg = PgCluster::start_with(PgOptions::new().setting("log_statement", "all"))?;
//! let url = pg.create_database("orders")?;
//! pg.psql("orders", "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);")?;
//! pg.stop_immediate()?; // simulated crash
//! pg.start_again()?; // crash recovery, same port: `url` stays valid
//! assert_eq!(pg.psql("orders", "SELECT count(*) FROM t")?, "1");
//! # let _ = url;
//! # Ok(())
//! # }
//! ```

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hash, Hasher};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod clock;
mod figures;
mod pgbouncer;
mod provider_log;
mod redis;
mod store;
mod tls;

pub use clock::{SKEW_TOLERANCE_SECS, check_clock_skew, clock_offset_secs, faketime_offset_secs};
pub use figures::{FIGURES_VAR, publish_figures};
pub use pgbouncer::{PGBOUNCER, PgBouncer, PgBouncerOptions};
pub use provider_log::{
    KeyCounts, LoggedRequest, counts_by_key, parse_request_log, request_log_by_effect,
    request_log_violations,
};
pub use redis::{REDIS_CLI, REDIS_SERVER, RedisCluster, RedisNode};
pub use store::{
    AnyBackend, AnyDb, Backend, BouncedDb, RedisStore, TestDb, age_records, count_in_flight,
    count_records, eventually,
};
pub use tls::{PgTls, SERVER_NAME};

/// Where Debian's PostgreSQL 15 server binaries live; the first place looked
/// at after `$IDEMKEY_PG_BIN`.
pub const DEFAULT_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// The OS user that runs the server when the current user is root.
const SERVER_OS_USER: &str = "postgres";

/// The database role every URL and client uses.
const ROLE: &str = "postgres";

/// Bump to invalidate existing template data directories.
const TEMPLATE_FORMAT: u32 = 1;

/// How often startup is retried when the chosen port turns out to be taken.
const START_ATTEMPTS: u32 = 8;

/// Seconds `pg_ctl` waits for the server to start or stop.
const PG_CTL_TIMEOUT_SECS: &str = "60";

/// Settings for [`PgCluster::start_with`]. Start from [`PgOptions::new`] (or
/// `Default`) and chain the builder methods.
#[derive(Debug, Clone)]
pub struct PgOptions {
    fsync: bool,
    max_connections: u32,
    settings: Vec<(String, String)>,
    bin_dir: Option<PathBuf>,
    dir: Option<PathBuf>,
    port: Option<u16>,
    tls_only: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            fsync: false,
            max_connections: 200,
            settings: Vec::new(),
            bin_dir: None,
            dir: None,
            port: None,
            tls_only: false,
        }
    }
}

impl PgOptions {
    /// The defaults: `fsync = off`, `max_connections = 200`, a temporary
    /// directory, a free port, binaries found as described in the crate docs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the server flushes to disk (`fsync`). Off by default, which is
    /// fine for tests, including [`PgCluster::stop_immediate`] crash tests
    /// (the operating system keeps what was written); turn it on for
    /// benchmarks.
    pub fn fsync(mut self, on: bool) -> Self {
        self.fsync = on;
        self
    }

    /// `max_connections` (default 200).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Adds a `postgresql.conf` setting, such as `("shared_buffers", "256MB")`.
    /// The value is written as a quoted string, which PostgreSQL accepts for
    /// settings of every type. Later settings win over earlier ones and over
    /// the ones this crate writes itself.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// Uses the server binaries in `dir` instead of looking for them.
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Keeps the cluster in `dir` (created if missing) instead of a
    /// temporary directory: `dir/data` holds the data directory (initialised
    /// only if it has none), `dir/sock` the socket and `dir/postgres.log` the
    /// server log. The directory is kept when the [`PgCluster`] is dropped;
    /// if a server is already running there, it is adopted as it is. The OS
    /// user `postgres` must be able to reach `dir` when running as root.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Listens on this TCP port instead of a free one. Startup then fails
    /// instead of retrying if the port is taken.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// TLS only over TCP: `ssl = on` with a server certificate for
    /// [`SERVER_NAME`] signed by a CA made for this cluster, and
    /// `pg_hba.conf` with `hostssl` lines only (the Unix socket, which the
    /// testkit's own clients use, stays open). See [`PgCluster::tls`].
    pub fn tls_only(mut self) -> Self {
        self.tls_only = true;
        self
    }
}

/// A database created by [`PgCluster::fresh_database`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    /// The database's name, for [`PgCluster::psql`].
    pub name: String,
    /// Its connection URL, `postgres://postgres@127.0.0.1:PORT/NAME`.
    pub url: String,
}

/// A PostgreSQL cluster (one server and its data directory) started for
/// tests. See the crate docs.
///
/// Dropping it stops the server (`immediate` mode for a temporary cluster,
/// `fast` for one in a [`PgOptions::dir`]) and removes the temporary
/// directory.
#[derive(Debug)]
pub struct PgCluster {
    tools: Tools,
    root: PathBuf,
    data: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    port: u16,
    temporary: bool,
    running: bool,
    detached: bool,
    watchdog: Option<Child>,
    tls: Option<PgTls>,
}

impl PgCluster {
    /// Starts a new cluster with the default [`PgOptions`] in a fresh
    /// temporary directory.
    pub fn start() -> io::Result<PgCluster> {
        Self::start_with(PgOptions::default())
    }

    /// Starts a cluster with the given options: creates the directories,
    /// initialises the data directory if needed, writes the settings, starts
    /// the server with `pg_ctl -w start` and waits until it accepts
    /// connections. If the port turns out to be taken (another process got
    /// it first), it retries with another port unless [`PgOptions::port`]
    /// was given.
    pub fn start_with(options: PgOptions) -> io::Result<PgCluster> {
        Self::start_inner(options, None)
    }

    /// [`start_with`](Self::start_with), trying `first_port` first (tests
    /// of the port-clash retry use it).
    fn start_inner(options: PgOptions, first_port: Option<u16>) -> io::Result<PgCluster> {
        let tools = Tools::detect(options.bin_dir.as_deref())?;
        let (root, temporary) = match &options.dir {
            Some(dir) => {
                fs::create_dir_all(dir)?;
                (dir.canonicalize()?, false)
            }
            None => (make_temp_root()?, true),
        };
        // From here on, `Drop` cleans up whatever went wrong.
        let mut cluster = PgCluster {
            data: root.join("data"),
            sock: root.join("sock"),
            log: root.join("postgres.log"),
            root,
            tools,
            port: 0,
            temporary,
            running: false,
            detached: false,
            watchdog: None,
            tls: None,
        };
        cluster.prepare_dirs()?;
        if options.tls_only {
            let tools = &cluster.tools;
            cluster.tls = Some(PgTls::prepare(&cluster.root, &cluster.data, |p| {
                tools.give(p)
            })?);
        }
        if !temporary && cluster.tools.status(&cluster.data)? {
            cluster.port = read_pid_file_port(&cluster.data)?;
            cluster.running = true;
            cluster.spawn_watchdog()?;
            return Ok(cluster);
        }
        let (port, may_move) = match options.port {
            Some(port) => (port, false),
            None => match first_port.or_else(|| previous_port(&cluster.data)) {
                Some(port) if first_port.is_some() || port_is_free(port) => (port, true),
                _ => (free_port()?, true),
            },
        };
        cluster.port = port;
        cluster.spawn_watchdog()?;
        cluster.start_server(&options, may_move)?;
        Ok(cluster)
    }

    /// The process-wide cluster shared by all tests of this test binary,
    /// started on first use with the default options and stopped by its
    /// watchdog when the process exits (statics are never dropped).
    ///
    /// Tests must not stop or reconfigure it (the control methods take
    /// `&mut self`, so they cannot); give each test its own database with
    /// [`PgCluster::fresh_database`]. Note that `cargo nextest` runs every
    /// test in its own process, so there each test gets its own "shared"
    /// cluster; it still costs only about half a second thanks to the
    /// template data directory.
    pub fn shared() -> io::Result<&'static PgCluster> {
        static SHARED: OnceLock<Result<PgCluster, (io::ErrorKind, String)>> = OnceLock::new();
        match SHARED.get_or_init(|| PgCluster::start().map_err(|e| (e.kind(), e.to_string()))) {
            Ok(cluster) => Ok(cluster),
            Err((kind, msg)) => Err(io::Error::new(
                *kind,
                format!("the shared PostgreSQL cluster failed to start: {msg}"),
            )),
        }
    }

    /// The connection URL of database `db`:
    /// `postgres://postgres@127.0.0.1:PORT/db` (the name percent-encoded).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{ROLE}@127.0.0.1:{}/{}",
            self.port,
            percent_encode(db)
        )
    }

    /// The certificates of a [`PgOptions::tls_only`] cluster.
    pub fn tls(&self) -> Option<&PgTls> {
        self.tls.as_ref()
    }

    /// The TCP port the server listens on, on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory (`PGDATA`).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The directory holding the server's Unix socket (usable as `host` in
    /// a libpq connection string).
    pub fn socket_dir(&self) -> &Path {
        &self.sock
    }

    /// The server's log file.
    pub fn log_file(&self) -> &Path {
        &self.log
    }

    /// Whether the server is running, as far as this handle knows.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Creates database `name` with `createdb` and returns its URL.
    pub fn create_database(&self, name: &str) -> io::Result<String> {
        let output = self
            .client("createdb")
            .arg("--")
            .arg(name)
            .stdin(Stdio::null())
            .output()?;
        check("createdb", &output)?;
        Ok(self.url(name))
    }

    /// Creates a database with a name unique within this process
    /// (`idemkey_PID_N`) and returns its name and URL.
    pub fn fresh_database(&self) -> io::Result<Database> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("idemkey_{}_{n}", std::process::id());
        let url = self.create_database(&name)?;
        Ok(Database { name, url })
    }

    /// Runs `sql` as a script on database `db` with `psql -X -q -A -t -v
    /// ON_ERROR_STOP=1` (so each statement runs on its own, in autocommit
    /// mode, and the first error stops the script) and returns what it
    /// printed, unaligned, tuples only, without trailing newlines. Fails
    /// with psql's error output if a statement fails.
    pub fn psql(&self, db: &str, sql: &str) -> io::Result<String> {
        let mut child = self
            .client("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"])
            .arg("--dbname")
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("psql stdin is piped");
        let script = sql.to_owned();
        // Write from a thread: psql may fill its output pipe before it has
        // read the whole script.
        let writer = thread::spawn(move || stdin.write_all(script.as_bytes()));
        let output = child.wait_with_output()?;
        let written = writer.join().expect("psql stdin writer panicked");
        check("psql", &output)?;
        written?;
        let mut stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        stdout.truncate(stdout.trim_end_matches('\n').len());
        Ok(stdout)
    }

    /// Stops the server with `pg_ctl -m fast stop` (clients are disconnected,
    /// a shutdown checkpoint is written). Does nothing if it is not running.
    pub fn stop_fast(&mut self) -> io::Result<()> {
        self.stop("fast")
    }

    /// Stops the server with `pg_ctl -m immediate stop`: every server
    /// process quits at once without a checkpoint, as in a crash; the next
    /// start runs crash recovery. Does nothing if it is not running.
    pub fn stop_immediate(&mut self) -> io::Result<()> {
        self.stop("immediate")
    }

    /// Starts the stopped server again on the same data directory and the
    /// same port, so URLs handed out before stay valid. Fails if the port has
    /// been taken meanwhile. Does nothing if it is running.
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.running {
            return Ok(());
        }
        self.pg_ctl_start()
    }

    /// [`stop_fast`](Self::stop_fast), then [`start_again`](Self::start_again).
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop_fast()?;
        self.start_again()
    }

    /// Sets a server setting with `ALTER SYSTEM SET name = 'value'` and
    /// reloads the configuration; returns once new connections see the
    /// reloaded configuration. Settings that need a restart (such as
    /// `shared_buffers`) take effect at the next
    /// [`restart`](Self::restart).
    pub fn set_setting(&mut self, name: &str, value: &str) -> io::Result<()> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a setting name: {name:?}"),
            ));
        }
        let load_time = "SELECT pg_conf_load_time()";
        let before = self.psql("postgres", load_time)?;
        self.psql(
            "postgres",
            &format!(
                "ALTER SYSTEM SET {name} = {};\nSELECT pg_reload_conf();",
                quote(value)
            ),
        )?;
        // The postmaster reloads asynchronously; wait until a new session
        // (forked after the reload) reports a newer load time.
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.psql("postgres", load_time)? == before {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the server did not reload its configuration within 30 s",
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Leaves the server running and the directory in place when this handle
    /// goes away, and stops its watchdog: for the `idemkey-pg` command,
    /// which starts a server for other processes. Stop it later with
    /// [`stop_dir`].
    pub fn detach(mut self) {
        self.detached = true;
    }

    // ---- internals ----

    /// A client command (`psql`, `createdb`) connected over the socket.
    fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.tools.bin.join(program));
        clean_env(&mut cmd);
        cmd.arg("--host")
            .arg(&self.sock)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--username")
            .arg(ROLE)
            .arg("--no-password")
            .current_dir(&self.root);
        cmd
    }

    fn prepare_dirs(&mut self) -> io::Result<()> {
        if !self.temporary {
            self.tools.check_reachable(&self.root)?;
        }
        if !self.data.join("PG_VERSION").exists() {
            if self.data.exists() {
                if fs::read_dir(&self.data)?.next().is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "{} exists but is not a PostgreSQL data directory",
                            self.data.display()
                        ),
                    ));
                }
                fs::remove_dir(&self.data)?;
            }
            let template = self.tools.template()?;
            copy_tree(&template.join("data"), &self.data)?;
        }
        if !self.sock.exists() {
            fs::create_dir(&self.sock)?;
        }
        fs::set_permissions(&self.sock, fs::Permissions::from_mode(0o1777))?;
        if !self.log.exists() {
            fs::File::create(&self.log)?;
            self.tools.give(&self.log)?;
        }
        Ok(())
    }

    fn write_config(&self, options: &PgOptions) -> io::Result<()> {
        let mut conf = String::from(
            "# Written by idemkey-testkit at every start; ALTER SYSTEM settings\n\
             # (postgresql.auto.conf) override these.\n",
        );
        let sock = self.sock.to_str().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "socket path is not UTF-8")
        })?;
        let port = self.port.to_string();
        let max_connections = options.max_connections.to_string();
        let fixed = [
            ("listen_addresses", "127.0.0.1"),
            ("port", port.as_str()),
            ("unix_socket_directories", sock),
            ("max_connections", max_connections.as_str()),
            ("fsync", if options.fsync { "on" } else { "off" }),
        ];
        let tls = match &self.tls {
            Some(tls) => tls.settings()?,
            None => Vec::new(),
        };
        let tls = tls.iter().map(|(name, value)| (*name, value.as_str()));
        let extra = options
            .settings
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()));
        for (name, value) in fixed.into_iter().chain(tls).chain(extra) {
            conf.push_str(&format!("{name} = {}\n", quote(value)));
        }
        let path = self.data.join("idemkey.conf");
        fs::write(&path, conf)?;
        self.tools.give(&path)
    }

    fn start_server(&mut self, options: &PgOptions, may_move: bool) -> io::Result<()> {
        let mut attempt = 1;
        loop {
            self.write_config(options)?;
            let log_start = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
            match self.pg_ctl_start() {
                Ok(()) => return Ok(()),
                Err(e) if may_move && attempt < START_ATTEMPTS => {
                    let log = read_from(&self.log, log_start).unwrap_or_default();
                    if !is_port_clash(&log) {
                        return Err(e);
                    }
                    attempt += 1;
                    self.port = free_port()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn pg_ctl_start(&mut self) -> io::Result<()> {
        let log_start = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let output = self
            .tools
            .server("pg_ctl", &self.root)
            .arg("--pgdata")
            .arg(&self.data)
            .arg("--log")
            .arg(&self.log)
            .args(["--wait", "--timeout", PG_CTL_TIMEOUT_SECS, "start"])
            .stdin(Stdio::null())
            .output()?;
        if output.status.success() {
            self.running = true;
            return Ok(());
        }
        let log = read_from(&self.log, log_start).unwrap_or_default();
        Err(io::Error::other(format!(
            "pg_ctl start failed ({}) for {} on port {}: {}\nserver log:\n{}",
            output.status,
            self.data.display(),
            self.port,
            String::from_utf8_lossy(&output.stderr).trim(),
            log.trim()
        )))
    }

    fn stop(&mut self, mode: &str) -> io::Result<()> {
        if !self.running {
            return Ok(());
        }
        self.tools.stop(&self.root, &self.data, mode)?;
        self.running = false;
        Ok(())
    }

    /// Starts the watchdog: a shell loop in its own process group (so that a
    /// test runner killing the test's group does not kill it) that waits
    /// for this process to disappear, then stops the server and removes the
    /// temporary directory.
    fn spawn_watchdog(&mut self) -> io::Result<()> {
        const SCRIPT: &str = r#"
owner=$1 root=$2 remove=$3
shift 3
while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
"$@" >/dev/null 2>&1
if [ "$remove" = 1 ]; then rm -rf -- "$root"; fi
"#;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(SCRIPT)
            .arg("idemkey-pg-watchdog")
            .arg(std::process::id().to_string())
            .arg(&self.root)
            .arg(if self.temporary { "1" } else { "0" });
        let stop = self.tools.stop_command(&self.root, &self.data, "immediate");
        cmd.arg(stop.get_program()).args(stop.get_args());
        let child = cmd
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        self.watchdog = Some(child);
        Ok(())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if !self.detached {
            // Also after a failed start: a server may be up without `pg_ctl`
            // having reported it.
            if self.running || self.data.join("postmaster.pid").exists() {
                let mode = if self.temporary { "immediate" } else { "fast" };
                let _ = self.tools.stop(&self.root, &self.data, mode);
                self.running = false;
            }
            if self.temporary {
                let _ = fs::remove_dir_all(&self.root);
            }
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Stops (`fast` mode) the server of a cluster directory made with
/// [`PgOptions::dir`] (`dir/data`). Returns whether a server was running.
pub fn stop_dir(dir: impl AsRef<Path>) -> io::Result<bool> {
    let root = dir.as_ref();
    let data = root.join("data");
    let tools = Tools::detect(None)?;
    if !data.join("PG_VERSION").exists() || !tools.status(&data)? {
        return Ok(false);
    }
    tools.stop(root, &data, "fast")?;
    Ok(true)
}

/// The TCP port of the server running in a cluster directory made with
/// [`PgOptions::dir`], or `None` if none is running there.
pub fn running_port(dir: impl AsRef<Path>) -> io::Result<Option<u16>> {
    let data = dir.as_ref().join("data");
    if !data.join("postmaster.pid").exists() || !Tools::detect(None)?.status(&data)? {
        return Ok(None);
    }
    read_pid_file_port(&data).map(Some)
}

/// The server binaries and, when running as root, the OS user to run them
/// as.
#[derive(Debug, Clone)]
struct Tools {
    bin: PathBuf,
    run_as: Option<Account>,
}

#[derive(Debug, Clone)]
struct Account {
    uid: u32,
    gid: u32,
}

impl Tools {
    fn detect(bin_dir: Option<&Path>) -> io::Result<Tools> {
        let bin = find_bin_dir(bin_dir)?;
        let run_as = if effective_uid()? == 0 {
            let id = |flag: &str| -> io::Result<u32> {
                let output = Command::new("id").arg(flag).arg(SERVER_OS_USER).output()?;
                check("id", &output).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "running as root, but there is no `{SERVER_OS_USER}` OS user to run \
                             the server as (initdb refuses root): {e}"
                        ),
                    )
                })?;
                parse_u32(&output.stdout, "id")
            };
            Some(Account {
                uid: id("-u")?,
                gid: id("-g")?,
            })
        } else {
            None
        };
        Ok(Tools { bin, run_as })
    }

    /// A server-side command (`initdb`, `pg_ctl`), run as the server's OS
    /// user, in `cwd` (which that user must be able to enter).
    fn server(&self, program: &str, cwd: &Path) -> Command {
        let path = self.bin.join(program);
        let mut cmd = match self.run_as {
            Some(_) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", SERVER_OS_USER, "--"]).arg(path);
                cmd
            }
            None => Command::new(path),
        };
        clean_env(&mut cmd);
        cmd.current_dir(cwd);
        cmd
    }

    /// Hands `path` to the server's OS user.
    fn give(&self, path: &Path) -> io::Result<()> {
        match &self.run_as {
            Some(account) => std::os::unix::fs::chown(path, Some(account.uid), Some(account.gid)),
            None => Ok(()),
        }
    }

    /// Fails with a clear message if the server's OS user cannot enter
    /// `dir` (say, because it is under `/root`).
    fn check_reachable(&self, dir: &Path) -> io::Result<()> {
        if self.run_as.is_none() {
            return Ok(());
        }
        let output = Command::new("runuser")
            .args(["-u", SERVER_OS_USER, "--", "test", "-x"])
            .arg(dir)
            .current_dir("/")
            .output()?;
        if output.status.success() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the `{SERVER_OS_USER}` OS user cannot reach {}: choose a directory it can \
                     enter, such as one under /tmp",
                    dir.display()
                ),
            ))
        }
    }

    /// Whether a server is running on `data` (`pg_ctl status`).
    fn status(&self, data: &Path) -> io::Result<bool> {
        if !data.join("postmaster.pid").exists() {
            return Ok(false);
        }
        let output = self
            .server("pg_ctl", data.parent().unwrap_or(Path::new("/")))
            .arg("--pgdata")
            .arg(data)
            .arg("status")
            .stdin(Stdio::null())
            .output()?;
        Ok(output.status.success())
    }

    fn stop_command(&self, root: &Path, data: &Path, mode: &str) -> Command {
        let mut cmd = self.server("pg_ctl", root);
        cmd.arg("--pgdata").arg(data).args([
            "--mode",
            mode,
            "--wait",
            "--timeout",
            PG_CTL_TIMEOUT_SECS,
            "stop",
        ]);
        cmd
    }

    /// Stops the server and waits until the postmaster has exited: `pg_ctl
    /// stop` returns as soon as `postmaster.pid` is gone, a moment before
    /// the process itself.
    fn stop(&self, root: &Path, data: &Path, mode: &str) -> io::Result<()> {
        let postmaster = fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|pid_file| pid_file.lines().next()?.trim().parse::<u32>().ok());
        let output = self
            .stop_command(root, data, mode)
            .stdin(Stdio::null())
            .output()?;
        check("pg_ctl stop", &output)?;
        if let Some(pid) = postmaster {
            let deadline = Instant::now() + Duration::from_secs(30);
            while process_alive(pid) {
                if Instant::now() > deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("postmaster {pid} still running 30 s after pg_ctl stop"),
                    ));
                }
                thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// The template data directory for these binaries, created (with
    /// `initdb`) under a lock by the first process that needs it.
    fn template(&self) -> io::Result<PathBuf> {
        let version = {
            let output = Command::new(self.bin.join("pg_ctl"))
                .arg("--version")
                .output()?;
            check("pg_ctl --version", &output)?;
            output.stdout
        };
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (TEMPLATE_FORMAT, &self.bin, version, effective_uid()?).hash(&mut hasher);
        let name = format!("idemkey-pg-template-{:016x}", hasher.finish());
        let base = std::env::temp_dir();
        let template = base.join(&name);
        if template.join("data").join("PG_VERSION").exists() {
            return Ok(template);
        }
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(base.join(format!("{name}.lock")))?;
        lock.lock()?;
        if template.join("data").join("PG_VERSION").exists() {
            return Ok(template);
        }
        let staging = base.join(format!("{name}.tmp-{}", std::process::id()));
        if staging.exists() {
            fs::remove_dir_all(&staging)?;
        }
        fs::create_dir(&staging)?;
        fs::set_permissions(&staging, fs::Permissions::from_mode(0o755))?;
        self.give(&staging)?;
        let data = staging.join("data");
        let output = self
            .server("initdb", &staging)
            .arg("--pgdata")
            .arg(&data)
            .args([
                "--username",
                ROLE,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()?;
        if let Err(e) = check("initdb", &output) {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))?;
        conf.write_all(b"\n# Added by idemkey-testkit.\ninclude_if_exists = 'idemkey.conf'\n")?;
        drop(conf);
        if template.exists() {
            // An incomplete leftover.
            fs::remove_dir_all(&template)?;
        }
        fs::rename(&staging, &template)?;
        Ok(template)
    }
}

/// Finds the directory holding `initdb` and `pg_ctl`.
fn find_bin_dir(explicit: Option<&Path>) -> io::Result<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = explicit {
        return if has_server(dir) {
            Ok(dir.to_path_buf())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no initdb/pg_ctl in {}", dir.display()),
            ))
        };
    }
    if let Some(dir) = std::env::var_os("IDEMKEY_PG_BIN") {
        return find_bin_dir(Some(Path::new(&dir)));
    }
    if has_server(Path::new(DEFAULT_BIN_DIR)) {
        return Ok(PathBuf::from(DEFAULT_BIN_DIR));
    }
    let newest = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .max();
    if let Some((_, bin)) = newest {
        return Ok(bin);
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_server(&dir) {
            return Ok(dir);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "PostgreSQL server binaries (initdb, pg_ctl) not found in $IDEMKEY_PG_BIN, \
             {DEFAULT_BIN_DIR}, /usr/lib/postgresql/*/bin or `pg_config --bindir`"
        ),
    ))
}

/// Removes libpq's `PG*` variables so that nothing from the caller's
/// environment (PGOPTIONS, PGSSLMODE, PGSERVICE, ...) changes what the tools
/// do.
fn clean_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"PG") {
            cmd.env_remove(&name);
        }
    }
}

fn effective_uid() -> io::Result<u32> {
    if let Ok(status) = fs::read_to_string("/proc/self/status")
        && let Some(uid) = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            .and_then(|euid| euid.parse().ok())
    {
        return Ok(uid);
    }
    let output = Command::new("id").arg("-u").output()?;
    check("id -u", &output)?;
    parse_u32(&output.stdout, "id -u")
}

/// Whether process `pid` exists and has not exited (a zombie waiting to be
/// reaped counts as exited). Where there is no `/proc`, assumes it exited.
fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn parse_u32(bytes: &[u8], what: &str) -> io::Result<u32> {
    String::from_utf8_lossy(bytes)
        .trim()
        .parse()
        .map_err(|e| io::Error::other(format!("unexpected output from {what}: {e}")))
}

/// Turns a failed command's exit status and stderr into an error.
fn check(what: &str, output: &Output) -> io::Result<()> {
    if output.status.success() {
        return Ok(());
    }
    let mut detail = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if detail.is_empty() {
        detail = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    }
    Err(io::Error::other(format!(
        "{what} failed ({}): {detail}",
        output.status
    )))
}

/// Makes a new, empty, world-readable directory
/// `$TMPDIR/idemkey-pg-PID-N-RANDOM`.
fn make_temp_root() -> io::Result<PathBuf> {
    unique_dir("idemkey-pg")
}

/// Makes a new, empty, world-readable directory
/// `$TMPDIR/PREFIX-PID-N-RANDOM`.
fn unique_dir(prefix: &str) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!(
            "{prefix}-{}-{n}-{:06x}",
            std::process::id(),
            random_u64() & 0xff_ffff
        ));
        match fs::create_dir(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    hasher.finish()
}

/// Copies a directory tree, keeping modes and (as root) owners: `cp -a`.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let output = Command::new("cp")
        .arg("-a")
        .arg("--")
        .arg(from)
        .arg(to)
        .output()?;
    check("cp -a", &output)
}

/// Picks a free TCP port on 127.0.0.1. It prefers ports below the kernel's
/// ephemeral range, so that client connections (whose local ports come from
/// that range) can never take the port while the server is stopped for
/// [`PgCluster::start_again`]; falls back to binding port 0.
fn free_port() -> io::Result<u16> {
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOW: u16 = 15000;
    if ephemeral_low > LOW + 1000 {
        let span = u64::from(ephemeral_low - LOW);
        for _ in 0..50 {
            let port = LOW + (random_u64() % span) as u16;
            if port_is_free(port) {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn is_port_clash(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("could not create any TCP/IP sockets")
}

/// The port a directory's server was last configured with.
fn previous_port(data: &Path) -> Option<u16> {
    let conf = fs::read_to_string(data.join("idemkey.conf")).ok()?;
    conf.lines().find_map(|line| {
        let value = line.strip_prefix("port = ")?;
        value.trim().trim_matches('\'').parse().ok()
    })
}

/// The port of a running server, from line 4 of `postmaster.pid`.
fn read_pid_file_port(data: &Path) -> io::Result<u16> {
    let pid_file = fs::read_to_string(data.join("postmaster.pid"))?;
    pid_file
        .lines()
        .nth(3)
        .and_then(|line| line.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no port in postmaster.pid"))
}

fn read_from(path: &Path, offset: u64) -> io::Result<String> {
    let mut file = fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A single-quoted SQL / postgresql.conf string literal.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_detected_and_another_one_used() {
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = squatter.local_addr().unwrap().port();
        let pg = PgCluster::start_inner(PgOptions::new(), Some(taken)).unwrap();
        assert_ne!(pg.port(), taken);
        assert_eq!(pg.psql("postgres", "SELECT 1").unwrap(), "1");
        let log = fs::read_to_string(pg.log_file()).unwrap();
        assert!(is_port_clash(&log), "{log}");
    }

    #[test]
    fn an_explicit_taken_port_fails_with_the_server_log() {
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = squatter.local_addr().unwrap().port();
        let err = PgCluster::start_with(PgOptions::new().port(taken)).unwrap_err();
        assert!(is_port_clash(&err.to_string()), "{err}");
    }

    #[test]
    fn free_ports_avoid_the_ephemeral_range() {
        let low: u16 = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        if low > 16000 {
            assert!(free_port().unwrap() < low);
        }
    }

    #[test]
    fn urls_and_literals_are_escaped() {
        assert_eq!(percent_encode("a b/c_d.e~f-g"), "a%20b%2Fc_d.e~f-g");
        assert_eq!(quote("it's"), "'it''s'");
    }
}
