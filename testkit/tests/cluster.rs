//! Tests of the throwaway clusters, against the machine's PostgreSQL.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use idemkey_testkit::{PgCluster, PgOptions, running_port, stop_dir};

/// The postmaster's pid, from the first line of `postmaster.pid`.
fn postmaster_pid(data: &Path) -> u32 {
    let pid_file = fs::read_to_string(data.join("postmaster.pid")).expect("postmaster.pid");
    pid_file.lines().next().unwrap().trim().parse().unwrap()
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn start_create_query_restart() {
    let mut pg = PgCluster::start().unwrap();
    let port = pg.port();
    assert!(pg.is_running());
    assert!(pg.data_dir().join("PG_VERSION").exists());
    assert_eq!(
        pg.url("orders"),
        format!("postgres://postgres@127.0.0.1:{port}/orders")
    );

    let url = pg.create_database("orders").unwrap();
    assert_eq!(url, pg.url("orders"));
    pg.psql(
        "orders",
        "CREATE TABLE t (id int PRIMARY KEY, v text);\n\
         INSERT INTO t VALUES (1, 'a'), (2, 'b');",
    )
    .unwrap();
    assert_eq!(
        pg.psql("orders", "SELECT v FROM t ORDER BY id").unwrap(),
        "a\nb"
    );
    assert_eq!(pg.psql("orders", "SHOW fsync").unwrap(), "off");
    assert_eq!(pg.psql("orders", "SHOW max_connections").unwrap(), "200");
    assert_eq!(
        pg.psql("orders", "SHOW listen_addresses").unwrap(),
        "127.0.0.1"
    );

    pg.restart().unwrap();
    assert_eq!(pg.port(), port);
    assert_eq!(pg.psql("orders", "SELECT count(*) FROM t").unwrap(), "2");
}

#[test]
fn crash_and_recovery_keep_committed_data() {
    let mut pg = PgCluster::start().unwrap();
    let port = pg.port();
    pg.psql(
        "postgres",
        "CREATE TABLE k (id int PRIMARY KEY);\n\
         INSERT INTO k SELECT generate_series(1, 1000);",
    )
    .unwrap();
    let pid = postmaster_pid(pg.data_dir());

    pg.stop_immediate().unwrap();
    assert!(!pg.is_running());
    assert!(!alive(pid), "postmaster survived stop_immediate");
    assert!(pg.psql("postgres", "SELECT 1").is_err());
    pg.stop_immediate().unwrap(); // stopping twice is fine

    pg.start_again().unwrap();
    assert_eq!(pg.port(), port);
    assert_eq!(
        pg.psql("postgres", "SELECT count(*) FROM k").unwrap(),
        "1000"
    );
    let log = fs::read_to_string(pg.log_file()).unwrap();
    assert!(
        log.contains("not properly shut down"),
        "no crash recovery in the log:\n{log}"
    );
}

#[test]
fn shared_cluster_hands_out_fresh_databases() {
    let shared = PgCluster::shared().unwrap();
    assert_eq!(PgCluster::shared().unwrap().port(), shared.port());
    let a = shared.fresh_database().unwrap();
    let b = shared.fresh_database().unwrap();
    assert_ne!(a.name, b.name);
    assert_eq!(a.url, shared.url(&a.name));
    shared.psql(&a.name, "CREATE TABLE only_in_a ()").unwrap();
    assert_eq!(
        shared
            .psql(
                &b.name,
                "SELECT count(*) FROM pg_class WHERE relname = 'only_in_a'"
            )
            .unwrap(),
        "0"
    );
}

#[test]
fn options_and_settings() {
    let mut pg = PgCluster::start_with(
        PgOptions::new()
            .fsync(true)
            .max_connections(50)
            .setting("log_line_prefix", "it's %m "),
    )
    .unwrap();
    assert_eq!(pg.psql("postgres", "SHOW fsync").unwrap(), "on");
    assert_eq!(pg.psql("postgres", "SHOW max_connections").unwrap(), "50");
    assert_eq!(
        pg.psql("postgres", "SHOW log_line_prefix").unwrap(),
        "it's %m "
    );

    pg.set_setting("statement_timeout", "1234ms").unwrap();
    assert_eq!(
        pg.psql("postgres", "SHOW statement_timeout").unwrap(),
        "1234ms"
    );
    assert!(pg.set_setting("work_mem; DROP", "1").is_err());

    // A setting that needs a restart shows up after one.
    pg.set_setting("max_connections", "60").unwrap();
    assert_eq!(pg.psql("postgres", "SHOW max_connections").unwrap(), "50");
    pg.restart().unwrap();
    assert_eq!(pg.psql("postgres", "SHOW max_connections").unwrap(), "60");
}

#[test]
fn psql_errors_carry_the_message() {
    let pg = PgCluster::shared().unwrap();
    let err = pg.psql("postgres", "SELEC 1").unwrap_err().to_string();
    assert!(err.contains("syntax error"), "{err}");
    let err = pg.psql("no_such_db", "SELECT 1").unwrap_err().to_string();
    assert!(err.contains("no_such_db"), "{err}");
    // The script stops at the first error.
    let db = pg.fresh_database().unwrap();
    assert!(
        pg.psql(&db.name, "CREATE TABLE a (); SELEC; CREATE TABLE b ();")
            .is_err()
    );
    assert_eq!(
        pg.psql(
            &db.name,
            "SELECT string_agg(relname, ',') FROM pg_class WHERE relname IN ('a', 'b')"
        )
        .unwrap(),
        "a"
    );
}

#[test]
fn drop_stops_the_server_and_removes_the_directory() {
    let pg = PgCluster::start().unwrap();
    let data = pg.data_dir().to_path_buf();
    let root = data.parent().unwrap().to_path_buf();
    let pid = postmaster_pid(&data);
    assert!(alive(pid));
    drop(pg);
    assert!(!alive(pid), "postmaster {pid} survived drop");
    assert!(!root.exists(), "{} survived drop", root.display());
}

#[test]
fn watchdog_stops_an_abandoned_cluster() {
    let out = std::env::temp_dir().join(format!("idemkey-testkit-helper-{}", std::process::id()));
    // A process that starts a cluster and exits without stopping it.
    let status = Command::new(env!("CARGO_BIN_EXE_idemkey-pg-abandon"))
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let report = fs::read_to_string(&out).unwrap();
    fs::remove_file(&out).unwrap();
    let mut lines = report.lines();
    let pid: u32 = lines.next().unwrap().parse().unwrap();
    let root = PathBuf::from(lines.next().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    wait_until(
        "the watchdog stops the postmaster",
        Duration::from_secs(20),
        || !alive(pid),
    );
    wait_until(
        "the watchdog removes the directory",
        Duration::from_secs(20),
        || !root.exists(),
    );
}

/// Stops the server of an `idemkey-pg` directory and removes it, even if the
/// test fails.
struct DirGuard(PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = stop_dir(&self.0);
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn idemkey_pg_command() {
    let dir = std::env::temp_dir().join(format!("idemkey-testkit-cmd-{}", std::process::id()));
    let _guard = DirGuard(dir.clone());
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_idemkey-pg"))
            .args(args)
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let started = run(&["start", "--db", "bench"]);
    assert!(started.status.success(), "{started:?}");
    let stdout = String::from_utf8(started.stdout).unwrap();
    let port = running_port(&dir).unwrap().expect("running after start");
    assert_eq!(
        stdout.trim(),
        format!("DATABASE_URL=postgres://postgres@127.0.0.1:{port}/bench")
    );

    // Starting again finds it running, on the same port.
    let again = run(&["start"]);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        String::from_utf8(again.stdout).unwrap().trim(),
        format!("DATABASE_URL=postgres://postgres@127.0.0.1:{port}/postgres")
    );
    assert_eq!(run(&["status"]).status.code(), Some(0));

    assert!(run(&["stop"]).status.success());
    assert_eq!(running_port(&dir).unwrap(), None);
    assert_eq!(run(&["status"]).status.code(), Some(3));

    // It starts again from the same directory; the database is still there.
    let restarted = run(&["start", "--db", "bench"]);
    assert!(restarted.status.success(), "{restarted:?}");
    assert!(stop_dir(&dir).unwrap());
}
