//! A primary with a synchronous streaming-replication standby, from the
//! machine's PostgreSQL binaries: the standby is a `pg_basebackup` of the
//! primary with `standby.signal` and a `primary_conninfo` naming it
//! `standby1`, which the primary's `synchronous_standby_names` requires.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use idemkey_testkit::{DEFAULT_BIN_DIR, PgCluster, PgOptions};

/// The standby's `application_name`.
const STANDBY_NAME: &str = "standby1";

/// The PostgreSQL server binaries: `$IDEMKEY_PG_BIN`, Debian's 15, or the
/// newest `/usr/lib/postgresql/*/bin` (as idemkey-testkit looks them up).
pub fn pg_bin() -> io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("IDEMKEY_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    if Path::new(DEFAULT_BIN_DIR).join("pg_basebackup").is_file() {
        return Ok(PathBuf::from(DEFAULT_BIN_DIR));
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("pg_basebackup").is_file())
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no pg_basebackup found"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A server-side command, run as `postgres` when we are root.
fn server_command(bin: &Path, program: &str) -> Command {
    if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(bin.join(program));
        cmd
    } else {
        Command::new(bin.join(program))
    }
}

fn run(mut cmd: Command, what: &str) -> io::Result<()> {
    let output = cmd.stdin(Stdio::null()).current_dir("/").output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// A primary and its synchronous standby.
pub struct Pair {
    /// The primary (killed by the failover scenario).
    pub primary: PgCluster,
    /// The standby (promoted by the failover scenario).
    pub standby: PgCluster,
    root: PathBuf,
    bin: PathBuf,
}

impl Pair {
    /// Starts a primary, runs `prepare(primary)` on it (create the database,
    /// accounts...), clones it into a standby under `root`, starts the
    /// standby and makes it synchronous.
    pub fn start(
        root: &Path,
        prepare: impl FnOnce(&PgCluster) -> io::Result<()>,
    ) -> io::Result<Self> {
        let bin = pg_bin()?;
        let primary = PgCluster::start_with(
            PgOptions::new()
                .setting("wal_level", "replica")
                .setting("max_wal_senders", "5")
                .setting("wal_keep_size", "256MB"),
        )?;
        prepare(&primary)?;
        fs::create_dir_all(root)?;
        fs::set_permissions(root, fs::Permissions::from_mode(0o755))?;
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres:postgres").arg(root);
                    c
                },
                "chown",
            )?;
        }
        let data = root.join("data");
        let mut backup = server_command(&bin, "pg_basebackup");
        backup
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-X",
                "stream",
                "--no-sync",
                "--checkpoint=fast",
            ])
            .arg("-p")
            .arg(primary.port().to_string())
            .arg("-D")
            .arg(&data);
        run(backup, "pg_basebackup")?;
        // Owned by postgres already (pg_basebackup ran as postgres).
        let signal = data.join("standby.signal");
        let mut touch = server_command(Path::new("/usr/bin"), "touch");
        touch.arg(&signal);
        run(touch, "touch standby.signal")?;
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}",
            primary.port()
        );
        let standby = PgCluster::start_with(
            PgOptions::new()
                .dir(root)
                .setting("primary_conninfo", conninfo)
                .setting("hot_standby", "on"),
        )?;
        let mut pair = Self {
            primary,
            standby,
            root: root.to_path_buf(),
            bin,
        };
        pair.primary
            .set_setting("synchronous_standby_names", STANDBY_NAME)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = pair.primary.psql(
                "postgres",
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'",
            )?;
            if state == "sync" {
                break;
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the standby did not become synchronous (state {state:?})"),
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(pair)
    }

    /// `postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/db?target_session_attrs=read-write`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            self.primary.port(),
            self.standby.port()
        )
    }

    /// Promotes the standby (`pg_ctl promote -w`).
    pub fn promote(&self) -> io::Result<()> {
        let mut cmd = server_command(&self.bin, "pg_ctl");
        cmd.args(["promote", "-w", "-t", "60", "-D"])
            .arg(self.standby.data_dir());
        run(cmd, "pg_ctl promote")
    }

    /// Whether the standby is still in recovery.
    pub fn standby_in_recovery(&self) -> io::Result<bool> {
        Ok(self
            .standby
            .psql("postgres", "SELECT pg_is_in_recovery()")?
            == "t")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = self.standby.stop_immediate();
        let _ = fs::remove_dir_all(&self.root);
    }
}
