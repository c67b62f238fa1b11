//! Real `idemkey-server` processes: found next to this program, started on
//! fixed loopback ports, killed with SIGKILL and started again on the same
//! port, their logs kept for evidence. Besides `serve`, the same slots run
//! the outbox's `worker` and the payment provider simulator (`provider`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How long a started server may take to listen.
const START_LIMIT: Duration = Duration::from_secs(30);

/// Finds the `idemkey-server` binary: `$IDEMKEY_SERVER_BIN`, else next to
/// this executable (or its parent, for test binaries in `deps/`).
pub fn server_bin() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("IDEMKEY_SERVER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let candidate = d.join("idemkey-server");
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n != "deps") {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "idemkey-server not found next to this program: build it first \
         (cargo build -p idemkey-server --features test-faults, same profile; \
         the fault scenarios need that feature) or set IDEMKEY_SERVER_BIN",
    ))
}

/// A free TCP port on 127.0.0.1 below the kernel's ephemeral range
/// (32768 and up), so no outgoing connection takes it while a killed server
/// is down.
pub fn free_port() -> io::Result<u16> {
    let mut rng = crate::rng::Rng::new(crate::rng::Rng::fresh_seed());
    for _ in 0..200 {
        let port = rng.range(20_000, 32_000) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Creates an account with the server's CLI; returns (account id, token).
pub fn create_account(bin: &Path, url: &str, name: &str) -> io::Result<(String, String)> {
    let output = Command::new(bin)
        .args(["account", "create", name, "--database-url", url])
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "account create failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let token = stdout.lines().last().unwrap_or_default().trim().to_owned();
    // "account <uuid> created: <name>"
    let account = stdout
        .lines()
        .find_map(|l| l.strip_prefix("account "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    if token.is_empty() || account.is_empty() {
        return Err(io::Error::other(format!("unexpected output: {stdout}")));
    }
    Ok((account, token))
}

/// What the processes of a [`ServerSet`] run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `idemkey-server serve`: the order service, on its slot's port.
    Serve,
    /// `idemkey-server worker`: delivers the outbox; listens on nothing.
    Worker,
    /// `idemkey-server provider`: the payment provider simulator, on its
    /// slot's port (kept across restarts, so the workers' URL stays valid).
    Provider,
}

impl Role {
    fn subcommand(self) -> &'static str {
        match self {
            Self::Serve => "serve",
            Self::Worker => "worker",
            Self::Provider => "provider",
        }
    }

    fn listens(self) -> bool {
        self != Self::Worker
    }

    /// Log files are `NAME-i.log`.
    fn log_name(self) -> &'static str {
        match self {
            Self::Serve => "server",
            Self::Worker => "worker",
            Self::Provider => "provider",
        }
    }
}

/// One server slot: a port and the process currently serving it.
#[derive(Debug)]
struct Slot {
    port: u16,
    child: Option<Child>,
    log: PathBuf,
}

/// Several servers on one database. Each slot keeps its port across
/// restarts; [`ServerSet::incarnations`] counts the processes per slot, so
/// the history can say which process answered.
#[derive(Debug)]
pub struct ServerSet {
    role: Role,
    bin: PathBuf,
    url: String,
    args: Vec<String>,
    /// Extra environment of each slot's process.
    envs: Vec<Vec<(String, String)>>,
    slots: Vec<Slot>,
    incarnations: Arc<Vec<AtomicU32>>,
    /// Processes that exited on their own (not killed by the harness).
    pub unexpected_exits: u32,
}

impl ServerSet {
    /// Starts `n` servers on `url` with extra `serve` flags `args`, logging to
    /// files under `log_dir`; waits until each listens.
    pub fn start(
        bin: &Path,
        url: &str,
        n: usize,
        args: &[String],
        log_dir: &Path,
    ) -> io::Result<Self> {
        Self::start_with_env(bin, url, n, args, log_dir, Vec::new())
    }

    /// [`ServerSet::start`], slot `i`'s process getting the extra
    /// environment `envs[i]` (e.g. a skewed clock).
    pub fn start_with_env(
        bin: &Path,
        url: &str,
        n: usize,
        args: &[String],
        log_dir: &Path,
        envs: Vec<Vec<(String, String)>>,
    ) -> io::Result<Self> {
        Self::start_role(Role::Serve, bin, url, n, args, log_dir, envs)
    }

    /// `n` processes of `role` on `url` (each `--database-url`), with extra
    /// flags `args` and slot `i`'s extra environment `envs[i]`; waits until
    /// each listens (a worker: until it is spawned).
    pub fn start_role(
        role: Role,
        bin: &Path,
        url: &str,
        n: usize,
        args: &[String],
        log_dir: &Path,
        envs: Vec<Vec<(String, String)>>,
    ) -> io::Result<Self> {
        fs::create_dir_all(log_dir)?;
        let mut slots = Vec::with_capacity(n);
        for i in 0..n {
            slots.push(Slot {
                port: if role.listens() { free_port()? } else { 0 },
                child: None,
                log: log_dir.join(format!("{}-{i}.log", role.log_name())),
            });
        }
        let mut set = Self {
            role,
            bin: bin.to_path_buf(),
            url: url.to_owned(),
            args: args.to_vec(),
            envs,
            incarnations: Arc::new((0..n).map(|_| AtomicU32::new(0)).collect()),
            slots,
            unexpected_exits: 0,
        };
        for i in 0..n {
            set.spawn(i)?;
        }
        Ok(set)
    }

    /// Base URLs, `http://127.0.0.1:PORT`, one per slot.
    pub fn bases(&self) -> Vec<String> {
        self.slots
            .iter()
            .map(|s| format!("http://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The incarnation counters (shared with the load driver).
    pub fn incarnations(&self) -> Arc<Vec<AtomicU32>> {
        Arc::clone(&self.incarnations)
    }

    /// How many slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The pid of slot `i`'s process, if one runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.slots[i].child.as_ref().map(Child::id)
    }

    /// The log file of slot `i`.
    pub fn log(&self, i: usize) -> &Path {
        &self.slots[i].log
    }

    /// Starts slot `i`'s process and waits until it listens.
    pub fn spawn(&mut self, i: usize) -> io::Result<()> {
        let slot = &mut self.slots[i];
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&slot.log)?;
        let bind = SocketAddr::from((Ipv4Addr::LOCALHOST, slot.port)).to_string();
        let mut cmd = Command::new(&self.bin);
        cmd.args([self.role.subcommand(), "--database-url", &self.url]);
        if self.role.listens() {
            cmd.args(["--bind", &bind]);
        }
        cmd.args(&self.args)
            .env("IDEMKEY_ALLOW_TEST_FAULTS", "1")
            .env("RUST_LOG", "warn")
            .envs(self.envs.get(i).into_iter().flatten().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let mut child = cmd.spawn()?;
        self.incarnations[i].fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + START_LIMIT;
        // A worker listens on nothing: an early exit shows in `revive`.
        while self.role.listens() {
            if let Some(status) = child.try_wait()? {
                let tail = tail(&slot.log, 2000);
                return Err(io::Error::other(format!(
                    "{} {i} exited at start ({status}):\n{tail}",
                    self.role.log_name()
                )));
            }
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, slot.port));
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} {i} did not listen within {START_LIMIT:?}",
                        self.role.log_name()
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        slot.child = Some(child);
        Ok(())
    }

    /// Replaces slot `i`'s extra environment for its next start.
    pub fn set_env(&mut self, i: usize, env: Vec<(String, String)>) {
        if self.envs.len() <= i {
            self.envs.resize(i + 1, Vec::new());
        }
        self.envs[i] = env;
    }

    /// SIGKILL for slot `i`'s process (and reaps it). `Ok(true)` only when
    /// a live process died: a slot with no process, or one whose process had
    /// already exited on its own, is no kill (and is counted as an
    /// unexpected exit).
    pub fn kill9(&mut self, i: usize) -> io::Result<bool> {
        let Some(mut child) = self.slots[i].child.take() else {
            return Ok(false);
        };
        if child.try_wait()?.is_some() {
            self.unexpected_exits += 1;
            return Ok(false);
        }
        child.kill()?;
        child.wait()?;
        Ok(true)
    }

    /// Restarts every process that exited on its own; returns how many.
    /// Start failures (the database down, say) are retried at the next call.
    pub fn revive(&mut self) -> u32 {
        let mut revived = 0;
        for i in 0..self.slots.len() {
            let exited = match self.slots[i].child.as_mut() {
                Some(child) => matches!(child.try_wait(), Ok(Some(_))),
                None => true,
            };
            if exited {
                if self.slots[i].child.take().is_some() {
                    self.unexpected_exits += 1;
                }
                if self.spawn(i).is_ok() {
                    revived += 1;
                }
            }
        }
        revived
    }

    /// Stops every process (SIGKILL: nothing is left to check in them).
    pub fn stop_all(&mut self) {
        for i in 0..self.slots.len() {
            let _ = self.kill9(i);
        }
    }
}

impl Drop for ServerSet {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Resident memory of a process in KiB, from `/proc/PID/status` (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The last `n` bytes of a file, lossily.
pub fn tail(path: &Path, n: usize) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(n);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// Creates a file (and its parents) and returns it.
pub fn create_file(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    File::create(path)
}
