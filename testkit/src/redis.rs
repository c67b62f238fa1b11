//! Throwaway Redis servers and Redis Clusters from Debian's `redis-server`
//! (and `redis-cli`, package `redis-tools`), for the Redis store's tests.
//!
//! * [`RedisNode::start`] runs one `redis-server` on `127.0.0.1` on a free
//!   port, with its files in a fresh temporary directory; dropping it kills
//!   the server and removes the directory. [`RedisNode::shared`] is one
//!   node shared by every test of the process (tests keep apart by their
//!   keys' scopes).
//! * [`RedisCluster::start`] runs `masters × (1 + replicas)` cluster-enabled
//!   servers and joins them with `redis-cli --cluster create`, then waits
//!   until every node reports `cluster_state:ok`.
//!
//! Like the PostgreSQL clusters, every server gets a watchdog (an `sh`
//! loop in its own process group) that kills it and removes its directory
//! once the test process is gone.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The server binary, looked up on `PATH`.
pub const REDIS_SERVER: &str = "redis-server";

/// The client binary, looked up on `PATH`.
pub const REDIS_CLI: &str = "redis-cli";

/// One `redis-server` process.
#[derive(Debug)]
pub struct RedisNode {
    child: Option<Child>,
    watchdog: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// The CA file of a TLS-only node.
    tls_ca: Option<PathBuf>,
}

impl RedisNode {
    /// A standalone node (no persistence: tests do not need it).
    pub fn start() -> io::Result<Self> {
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// A node with extra `redis-server` arguments (e.g. `--appendonly yes`).
    pub fn start_with(args: &[&str]) -> io::Result<Self> {
        let dir = super::unique_dir("idemkey-redis")?;
        let mut last = None;
        for _ in 0..8 {
            let port = free_port_pair()?;
            match Self::spawn(&dir, port, args) {
                Ok(node) => return Ok(node),
                Err(e) => last = Some(e),
            }
        }
        let _ = fs::remove_dir_all(&dir);
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// A node that speaks TLS only, with a certificate for `127.0.0.1` and
    /// `localhost` from a throwaway CA (made with `openssl`), whose file is
    /// [`RedisNode::tls_ca`]; its URL is `rediss://`.
    pub fn start_tls() -> io::Result<Self> {
        let dir = super::unique_dir("idemkey-redis-tls")?;
        let openssl = |args: &[&str]| -> io::Result<()> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()?;
            if out.status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "openssl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                )))
            }
        };
        fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )?;
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=idemkey test CA",
        ])?;
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ])?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ])?;
        let mut last = None;
        for _ in 0..8 {
            let port = free_port_pair()?;
            let tls_port = port.to_string();
            let args = [
                "--port",
                "0",
                "--tls-port",
                &tls_port,
                "--tls-cert-file",
                "server.crt",
                "--tls-key-file",
                "server.key",
                "--tls-ca-cert-file",
                "ca.crt",
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ];
            match Self::spawn_tls(&dir, port, &args) {
                Ok(node) => return Ok(node),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn spawn_tls(dir: &Path, port: u16, args: &[&str]) -> io::Result<Self> {
        Self::spawn_with(dir, port, args, Some(dir.join("ca.crt")))
    }

    /// The CA file of a [`RedisNode::start_tls`] node.
    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls_ca.as_deref()
    }

    /// The node shared by every test of this process.
    pub fn shared() -> io::Result<&'static RedisNode> {
        static SHARED: OnceLock<Result<RedisNode, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| io::Error::other(format!("the shared Redis node failed to start: {e}")))
    }

    fn spawn(dir: &Path, port: u16, args: &[&str]) -> io::Result<Self> {
        Self::spawn_with(dir, port, args, None)
    }

    fn spawn_with(
        dir: &Path,
        port: u16,
        args: &[&str],
        tls_ca: Option<PathBuf>,
    ) -> io::Result<Self> {
        let mut command = Command::new(REDIS_SERVER);
        command
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join(format!("redis-{port}.log")))
            .args(args);
        let child = spawn_daemon(&mut command, dir, "redis-server")?;
        let mut node = Self {
            watchdog: Some(watchdog(child.id(), dir)?),
            child: Some(child),
            port,
            dir: dir.to_owned(),
            tls_ca,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            // The answer must come from this child, not from another
            // process that held the port (the child then fails to bind).
            if node.pings() && node.answers_as_itself() {
                return Ok(node);
            }
            if let Some(child) = node.child.as_mut()
                && child.try_wait()?.is_some()
            {
                node.child = None;
                return Err(io::Error::other(format!(
                    "redis-server exited: {}",
                    node.log()
                )));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(io::Error::other(format!(
            "redis-server did not answer: {}",
            node.log()
        )))
    }

    /// Whether the server on the port is this node's child (`INFO server`
    /// names its process id).
    fn answers_as_itself(&self) -> bool {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return false;
        };
        self.cli(&["info", "server"]).is_ok_and(|info| {
            info.lines()
                .any(|l| l.trim() == format!("process_id:{pid}"))
        })
    }

    fn pings(&self) -> bool {
        if self.tls_ca.is_some() {
            return self.cli(&["ping"]).is_ok_and(|r| r == "PONG");
        }
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` for a TLS node).
    pub fn url(&self) -> String {
        let scheme = if self.tls_ca.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join(format!("redis-{}.log", self.port))).unwrap_or_default()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Runs `redis-cli -p PORT ARGS…` and returns its trimmed stdout.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        match &self.tls_ca {
            Some(ca) => {
                let ca = ca.to_string_lossy();
                let mut tls = vec!["--tls", "--cacert", &ca];
                tls.extend_from_slice(args);
                cli(self.port, &tls)
            }
            None => cli(self.port, args),
        }
    }

    /// Stops the process (SIGSTOP) until [`RedisNode::thaw`]: a replica that
    /// falls behind, a master that stops answering.
    pub fn freeze(&self) -> io::Result<()> {
        self.signal("-STOP")
    }

    /// Resumes a frozen process (SIGCONT).
    pub fn thaw(&self) -> io::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> io::Result<()> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| io::Error::other("the node is not running"))?;
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill {signal} failed")))
        }
    }

    /// Kills the server with SIGKILL (a crash: nothing flushed).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        if self.tls_ca.is_some() {
            // A TLS node's directory is its own (with its certificates).
            let _ = fs::remove_dir_all(&self.dir);
            return;
        }
        // The cluster's nodes share a directory; the last one (no other
        // node's log left) removes it with what Redis wrote there besides
        // (a replica's copy of its master's data, `dump.rdb`).
        let _ = fs::remove_file(self.dir.join(format!("redis-{}.log", self.port)));
        let _ = fs::remove_file(self.dir.join(format!("nodes-{}.conf", self.port)));
        let another_node = match fs::read_dir(&self.dir) {
            Ok(entries) => entries.flatten().any(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                name.starts_with("redis-") && name.ends_with(".log")
            }),
            Err(_) => true,
        };
        if !another_node {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A Redis Cluster of `masters` masters, each with `replicas` replicas.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisNode>,
}

impl RedisCluster {
    /// Starts the servers, creates the cluster and waits until it is ok.
    pub fn start(masters: usize, replicas: usize) -> io::Result<Self> {
        let dir = super::unique_dir("idemkey-redis-cluster")?;
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let mut started = None;
            for _ in 0..8 {
                let port = free_port_pair()?;
                let conf = format!("nodes-{port}.conf");
                let args = [
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "2000",
                    // Replicas sync at once (the default waits 5 s).
                    "--repl-diskless-sync-delay",
                    "0",
                ];
                if let Ok(node) = RedisNode::spawn(&dir, port, &args) {
                    started = Some(node);
                    break;
                }
            }
            nodes.push(started.ok_or_else(|| io::Error::other("a cluster node did not start"))?);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        let replicas = replicas.to_string();
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        cli(nodes[0].port, &args)?;
        let cluster = Self { nodes };
        cluster.wait_until_ok(Duration::from_secs(30))?;
        // Every replica attached and synced (a node not yet told to
        // replicate still says it is a master).
        let deadline = Instant::now() + Duration::from_secs(30);
        let wanted = masters * replicas.parse::<usize>().unwrap_or(0);
        while cluster.synced_replicas() < wanted {
            if Instant::now() > deadline {
                return Err(io::Error::other("the replicas did not sync"));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(cluster)
    }

    /// The cluster shared by every test of this process: 3 masters, each
    /// with one replica.
    pub fn shared() -> io::Result<&'static RedisCluster> {
        static SHARED: OnceLock<Result<RedisCluster, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::start(3, 1).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| io::Error::other(format!("the shared Redis Cluster failed to start: {e}")))
    }

    /// Waits until every running node (killed ones are skipped) reports `cluster_state:ok` and agrees
    /// that all 16384 slots are assigned, and every replica's link to its
    /// master is up (so `WAIT` can be answered).
    pub fn wait_until_ok(&self, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let cluster_ok = cli(n.port, &["cluster", "info"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
                });
                let synced = cli(n.port, &["info", "replication"]).is_ok_and(|info| {
                    info.contains("role:master") || info.contains("master_link_status:up")
                });
                cluster_ok && synced
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other("the Redis Cluster did not become ok"));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The running replicas of the master on `port`.
    pub fn replicas_of(&self, port: u16) -> Vec<&RedisNode> {
        let line = format!("master_port:{port}");
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| cli(n.port, &["info", "replication"]).is_ok_and(|i| i.contains(&line)))
            .collect()
    }

    /// How many running replicas have their link to a master up.
    pub fn synced_replicas(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| {
                cli(n.port, &["info", "replication"])
                    .is_ok_and(|info| info.contains("master_link_status:up"))
            })
            .count()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` (every node a seed).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Every node, masters and replicas.
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// Every node, to kill one.
    pub fn nodes_mut(&mut self) -> &mut [RedisNode] {
        &mut self.nodes
    }

    /// The ports of the running nodes that are masters now (`ROLE`).
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| {
                cli(n.port, &["role"]).is_ok_and(|role| role.lines().next() == Some("master"))
            })
            .map(RedisNode::port)
            .collect()
    }
}

/// Runs `redis-cli -p PORT ARGS…`.
fn cli(port: u16, args: &[&str]) -> io::Result<String> {
    // Bounded: `--cluster create` waits for every node to join, forever if
    // one of them died.
    let output = Command::new("timeout")
        .args([
            "--kill-after=5",
            &CLI_LIMIT.as_secs().to_string(),
            REDIS_CLI,
        ])
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    match output.status.code() {
        Some(124 | 137) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "redis-cli {} gave no answer within {CLI_LIMIT:?}",
                    args.join(" ")
                ),
            ));
        }
        Some(126 | 127) => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("cannot run {REDIS_CLI} (Debian package redis-tools)"),
            ));
        }
        _ => {}
    }
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "redis-cli {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The longest one `redis-cli` call may take.
const CLI_LIMIT: Duration = Duration::from_secs(60);

/// A port whose cluster-bus companion (port + 10000) is free as well,
/// below the ephemeral range when it can.
fn free_port_pair() -> io::Result<u16> {
    for _ in 0..100 {
        let port = super::free_port()?;
        if port < 55_000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port pair"))
}

/// Starts a service process of the test kit in `dir`, detached from the
/// test's standard streams (it logs to its own file); a missing binary
/// names the Debian package that brings it.
pub(super) fn spawn_daemon(command: &mut Command, dir: &Path, package: &str) -> io::Result<Child> {
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            let program = command.get_program().to_string_lossy().into_owned();
            io::Error::new(
                e.kind(),
                format!("cannot run {program} (Debian package {package}): {e}"),
            )
        })
}

/// Kills `pid` and removes `dir` once this process is gone.
pub(super) fn watchdog(pid: u32, dir: &Path) -> io::Result<Child> {
    const SCRIPT: &str = r#"
owner=$1 pid=$2 dir=$3
while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
kill -9 "$pid" 2>/dev/null
rm -rf -- "$dir"
"#;
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("idemkey-redis-watchdog")
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
}
