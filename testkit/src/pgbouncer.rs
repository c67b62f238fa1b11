//! A throwaway PgBouncer (Debian's `pgbouncer`, `/usr/sbin/pgbouncer`) in
//! front of a [`PgCluster`], for the tests that run idemkey behind a
//! connection pooler.
//!
//! [`PgBouncer::start`] writes its own ini file and user list in a fresh
//! temporary directory and runs `pgbouncer` in the foreground on a free
//! loopback port, in **transaction** pooling mode with a small pool (so that
//! many client connections really share few server connections), `trust`
//! authentication for the role `postgres` (the cluster's), and an admin
//! console ([`PgBouncer::admin`]). As root it runs as the `postgres` OS user
//! (`pgbouncer -u postgres`: PgBouncer refuses to run as root). Dropping it
//! kills the process and removes the directory; a watchdog does the same
//! when the test process is gone.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{PgCluster, ROLE, SERVER_OS_USER, Tools, effective_uid, free_port, unique_dir};

/// Debian's PgBouncer binary.
pub const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// Settings for [`PgBouncer::start_with`].
#[derive(Clone, Debug)]
pub struct PgBouncerOptions {
    pool_size: u32,
    ignore_startup_parameters: Vec<String>,
}

impl Default for PgBouncerOptions {
    fn default() -> Self {
        Self {
            pool_size: 2,
            ignore_startup_parameters: Vec::new(),
        }
    }
}

impl PgBouncerOptions {
    /// Pool size 2, no ignored startup parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Server connections per database (`default_pool_size` and
    /// `max_db_connections`; no reserve pool).
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// Adds a startup parameter that PgBouncer accepts and drops instead of
    /// refusing the connection (`ignore_startup_parameters`).
    pub fn ignore_startup_parameter(mut self, name: impl Into<String>) -> Self {
        self.ignore_startup_parameters.push(name.into());
        self
    }
}

/// A running PgBouncer. See the module docs.
#[derive(Debug)]
pub struct PgBouncer {
    child: Option<Child>,
    watchdog: Option<Child>,
    dir: PathBuf,
    port: u16,
    psql: PathBuf,
}

impl PgBouncer {
    /// Transaction pooling with two server connections in front of `cluster`.
    pub fn start(cluster: &PgCluster) -> io::Result<Self> {
        Self::start_with(cluster, PgBouncerOptions::new())
    }

    /// Transaction pooling in front of `cluster` with these options.
    pub fn start_with(cluster: &PgCluster, options: PgBouncerOptions) -> io::Result<Self> {
        let tools = Tools::detect(None)?;
        let mut last = None;
        // Another process may take the chosen port first: try another one
        // (each attempt in a directory of its own, removed if it fails).
        for _ in 0..8 {
            let dir = unique_dir("idemkey-pgbouncer")?;
            match Self::spawn(cluster, &options, &tools, &dir) {
                Ok(bouncer) => return Ok(bouncer),
                Err(e) => {
                    let _ = fs::remove_dir_all(&dir);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("pgbouncer did not start")))
    }

    fn spawn(
        cluster: &PgCluster,
        options: &PgBouncerOptions,
        tools: &Tools,
        dir: &std::path::Path,
    ) -> io::Result<Self> {
        let port = free_port()?;
        let log = dir.join("pgbouncer.log");
        let users = dir.join("userlist.txt");
        let ini = dir.join("pgbouncer.ini");
        let mut text = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={pg}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             pidfile =\n\
             logfile = {log}\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             admin_users = {ROLE}\n\
             pool_mode = transaction\n\
             default_pool_size = {size}\n\
             max_db_connections = {size}\n\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = 2000\n",
            pg = cluster.port(),
            log = log.display(),
            users = users.display(),
            size = options.pool_size,
        );
        if !options.ignore_startup_parameters.is_empty() {
            text.push_str(&format!(
                "ignore_startup_parameters = {}\n",
                options.ignore_startup_parameters.join(",")
            ));
        }
        fs::write(&ini, text)?;
        fs::write(&users, format!("\"{ROLE}\" \"\"\n"))?;
        if !log.exists() {
            fs::File::create(&log)?;
        }
        for path in [dir, log.as_path(), users.as_path(), ini.as_path()] {
            tools.give(path)?;
        }
        let mut cmd = Command::new(PGBOUNCER);
        if effective_uid()? == 0 {
            cmd.args(["-u", SERVER_OS_USER]);
        }
        cmd.arg(&ini);
        let child = super::redis::spawn_daemon(&mut cmd, dir, "pgbouncer")?;
        let mut bouncer = Self {
            watchdog: Some(super::redis::watchdog(child.id(), dir)?),
            child: Some(child),
            dir: dir.to_owned(),
            port,
            psql: tools.bin.join("psql"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(child) = bouncer.child.as_mut()
                && child.try_wait()?.is_some()
            {
                bouncer.child = None;
                return Err(io::Error::other(format!(
                    "pgbouncer exited: {}",
                    bouncer.log()
                )));
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(bouncer);
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(io::Error::other(format!(
            "pgbouncer did not listen: {}",
            bouncer.log()
        )))
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/db`: database `db` of the
    /// cluster, through PgBouncer.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{ROLE}@127.0.0.1:{}/{}",
            self.port,
            super::percent_encode(db)
        )
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Runs a command on the admin console (`SHOW POOLS`, `RECONNECT`, …)
    /// and returns psql's unaligned output.
    pub fn admin(&self, command: &str) -> io::Result<String> {
        let mut cmd = Command::new(&self.psql);
        super::clean_env(&mut cmd);
        let output = cmd
            .args(["-X", "-A", "-t", "-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(["-U", ROLE, "-d", "pgbouncer", "-c", command])
            .stdin(Stdio::null())
            .output()?;
        super::check("psql (pgbouncer admin)", &output)?;
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
