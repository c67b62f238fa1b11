//! The command line: `serve`, `migrate`, `account` and `token`, each flag
//! with an environment-variable fallback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use idemkey_core::{ExpiryPolicy, KeyProfile};

use crate::db::PgPooler;

mod database;
mod outbox;

pub use database::DatabaseArgs;
use idemkey::duration::{MAX_DURATION, MAX_INTERVAL, MAX_WAIT, duration_at_most};
pub use outbox::{OutboxArgs, OutboxCommand, WorkerArgs};

/// Environment variable that must be `1` for `--test-faults` to be accepted.
pub const ALLOW_TEST_FAULTS_ENV: &str = "IDEMKEY_ALLOW_TEST_FAULTS";

/// idemkey-server: an order service whose POST /orders is safe to retry with
/// an Idempotency-Key.
#[derive(Debug, Parser)]
#[command(name = "idemkey-server", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending migrations, then serve HTTP until SIGTERM or SIGINT.
    Serve(Box<ServeArgs>),
    /// Apply pending migrations and exit.
    Migrate(DatabaseArgs),
    /// Manage accounts.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Manage API tokens: create, list (ids and times, never the token) and
    /// revoke (refused by every server process from the next request on).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Deliver the outbox (charges to the payment provider) without
    /// serving HTTP; any number may run beside the servers (PostgreSQL).
    Worker(WorkerArgs),
    /// Look at the outbox and send dead letters back to pending.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Serve the conformance fixture: test routes behind the idempotency
    /// layer (a conformance fixture for third-party suites; part of the
    /// binary, not of the library).
    Fixture(FixtureArgs),
    /// Serve the payment provider simulator (tests and the demo): charges
    /// behind the idempotency layer, with fault switches. Only in builds
    /// with the `provider-sim` feature: the release binary does not carry it.
    #[cfg(feature = "provider-sim")]
    Provider(idemkey_provider_sim::ProviderArgs),
}

/// `account` subcommands.
#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// Create an account; its new API token is the last line of stdout.
    Create {
        /// The account's display name.
        name: String,
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List the accounts: id, created, tokens not revoked, kind, name.
    List {
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// `token` subcommands. ACCOUNT is an account's id, or its name when
/// exactly one account has that name (names are not unique).
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Add a token to an account; the token is shown once, as the last line
    /// of stdout.
    Create {
        /// The account's id, or its name if no other account has it.
        account: String,
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List an account's tokens: id, created, last used (to within the
    /// servers' --token-last-used-interval), revoked.
    List {
        /// The account's id, or its name if no other account has it.
        account: String,
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Revoke a token by its id (from `token list`).
    Revoke {
        /// The token's id.
        id: uuid::Uuid,
        /// Where the data lives.
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Flags of `serve`.
#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    /// Where the data lives.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on.
    #[arg(long, env = "IDEMKEY_BIND", default_value = "127.0.0.1:3000")]
    pub bind: SocketAddr,
    /// How Idempotency-Key values are read: strict, lenient or uuid.
    #[arg(long, env = "IDEMKEY_KEY_PROFILE", default_value = "lenient", value_parser = parse_profile)]
    pub key_profile: KeyProfile,
    /// How long a stored response is replayed (e.g. 2s, 15m, 24h).
    #[arg(long, env = "IDEMKEY_REPLAY_TTL", default_value = "24h", value_parser = duration_at_most(MAX_DURATION))]
    pub replay_ttl: Duration,
    /// How long a key is remembered after creation (as a tombstone after the
    /// replay window), so reuse, expiry and lookups still answer.
    #[arg(long, env = "IDEMKEY_TOMBSTONE_TTL", default_value = "30d", value_parser = duration_at_most(MAX_DURATION))]
    pub tombstone_ttl: Duration,
    /// After the replay window: reject (410) or reexecute.
    #[arg(long, env = "IDEMKEY_EXPIRY_POLICY", default_value = "reject", value_parser = parse_policy)]
    pub expiry_policy: ExpiryPolicy,
    /// Largest number of database connections.
    #[arg(long, env = "IDEMKEY_POOL_SIZE", default_value_t = 10)]
    pub pool_size: usize,
    /// How long a request waits for a database connection before 503 (on
    /// SQLite: for its one connection and another process's write lock).
    #[arg(long, env = "IDEMKEY_POOL_WAIT", default_value = "5s", value_parser = duration_at_most(MAX_WAIT))]
    pub pool_wait: Duration,
    /// SQLite only: read-only connections for order reads, key lookups and
    /// /metrics, which then never wait for the writer (0: they share the
    /// writer's one connection).
    #[arg(long, env = "IDEMKEY_SQLITE_READERS", default_value_t = idemkey::store::sqlite::DEFAULT_READERS)]
    pub sqlite_readers: usize,
    /// Most client connections at once; past it a new connection gets 503
    /// service-unavailable with Retry-After and is closed.
    #[arg(long, env = "IDEMKEY_MAX_CONNECTIONS", default_value_t = idemkey::load_shed::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Most requests in progress at once (/healthz, /readyz, /metrics
    /// aside); past it a request gets 503 service-unavailable at once.
    #[arg(long, env = "IDEMKEY_MAX_IN_FLIGHT", default_value_t = idemkey::load_shed::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Longest lock wait (a concurrent request with the same key) before 409.
    #[arg(long, env = "IDEMKEY_LOCK_TIMEOUT", default_value = "2s", value_parser = duration_at_most(MAX_WAIT))]
    pub lock_timeout: Duration,
    /// Longest statement before 503.
    #[arg(long, env = "IDEMKEY_STATEMENT_TIMEOUT", default_value = "5s", value_parser = duration_at_most(MAX_WAIT))]
    pub statement_timeout: Duration,
    /// Longest wait for a request body once its head has arrived; past it
    /// the request gets 400 request-invalid and its connection is closed.
    #[arg(long, env = "IDEMKEY_BODY_READ_TIMEOUT", default_value = "10s", value_parser = duration_at_most(MAX_WAIT))]
    pub body_read_timeout: Duration,
    /// How long `POST /purchases` waits for a purchase's steps to end
    /// before answering 202 with its state (0: at once).
    #[arg(long, env = "IDEMKEY_PURCHASE_WAIT", default_value = "2s", value_parser = duration_at_most(MAX_WAIT))]
    pub purchase_wait: Duration,
    /// How often the background task trims expired records.
    #[arg(long, env = "IDEMKEY_TRIM_INTERVAL", default_value = "60s", value_parser = duration_at_most(MAX_INTERVAL))]
    pub trim_interval: Duration,
    /// Rows per trim batch.
    #[arg(long, env = "IDEMKEY_TRIM_BATCH", default_value_t = 500)]
    pub trim_batch: u32,
    /// How long in-flight requests may take to finish after SIGTERM.
    #[arg(long, env = "IDEMKEY_SHUTDOWN_GRACE", default_value = "10s", value_parser = duration_at_most(MAX_WAIT))]
    pub shutdown_grace: Duration,
    /// How often each process writes its tokens' `last_used_at` (one
    /// UPDATE per interval, never one per request): `token list` shows the
    /// last use to within this interval.
    #[arg(long, env = "IDEMKEY_TOKEN_LAST_USED_INTERVAL", default_value = "60s", value_parser = duration_at_most(MAX_INTERVAL))]
    pub token_last_used_interval: Duration,
    /// Memory of the replay cache, in MiB: completed results answered again
    /// without a database read, in each process. 0 turns it off.
    #[arg(long, env = "IDEMKEY_REPLAY_CACHE_MIB", default_value_t = 64)]
    pub replay_cache_mib: u64,
    /// How long a token's account is trusted by the replay cache without
    /// asking the database: the longest a revoked token can still replay
    /// from a process's cache (everything else checks the token in the
    /// database at once). 0s turns the cache off.
    #[arg(long, env = "IDEMKEY_AUTH_CACHE_TTL", default_value = "1s", value_parser = duration_at_most(MAX_WAIT))]
    pub auth_cache_ttl: Duration,
    /// Where charges go and how the outbox is delivered.
    #[command(flatten)]
    pub outbox: OutboxArgs,
    /// Log format.
    #[arg(long, env = "IDEMKEY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Demo mode: two demo accounts of its own (their tokens rotated at
    /// each start and served at /demo/tokens), the js-demo page at `/` and
    /// the `POST /demo/lose-next-response` switch. Only with a loopback
    /// --bind (127.0.0.1, ::1); /demo/* refuses cross-site requests.
    #[arg(long, env = "IDEMKEY_DEMO", value_parser = clap::builder::BoolishValueParser::new())]
    pub demo: bool,
    /// Directory of the demo's static files.
    #[arg(long, env = "IDEMKEY_DEMO_DIR", default_value = "js-demo")]
    pub demo_dir: PathBuf,
    /// Test-only fault injection through the `x-idemkey-test-fault` request
    /// header; refused unless IDEMKEY_ALLOW_TEST_FAULTS=1. Only in builds
    /// with the `test-faults` feature.
    #[cfg(feature = "test-faults")]
    #[arg(long, hide = true)]
    pub test_faults: bool,
}

/// Flags of `fixture`.
#[derive(Clone, Debug, Args)]
pub struct FixtureArgs {
    /// Address to listen on; a loopback address (127.0.0.1, ::1) unless
    /// --allow-non-loopback.
    #[arg(long, env = "IDEMKEY_FIXTURE_BIND", default_value = "127.0.0.1:3001")]
    pub bind: SocketAddr,
    /// Serve on a non-loopback --bind: the fixture has no authentication
    /// and one shared scope, so anyone who reaches it replays everyone's
    /// responses.
    #[arg(long)]
    pub allow_non_loopback: bool,
    /// sqlite://PATH, postgres://…, redis://… (rediss:// for TLS) or
    /// redis+cluster://host:port,host:port; default: a new SQLite file in
    /// the temporary directory.
    #[arg(long, env = "IDEMKEY_FIXTURE_DATABASE_URL")]
    pub database_url: Option<String>,
    /// PostgreSQL only: `transaction` behind a pooler in transaction mode
    /// (docs/pgbouncer.md).
    #[arg(long, env = "IDEMKEY_PG_POOLER", value_enum, default_value_t = PgPooler::None)]
    pub pg_pooler: PgPooler,
    /// Redis only: replicas that must acknowledge each claim and completion
    /// (`WAIT`) before the request goes on; fewer in time answers 503.
    #[arg(long, default_value_t = 0)]
    pub redis_wait_replicas: u32,
    /// Redis only: how long `WAIT` may take.
    #[arg(long, default_value = "1s", value_parser = duration_at_most(MAX_WAIT))]
    pub redis_wait_timeout: Duration,
    /// Redis only: how long a record outlives its lease (abandoned claims)
    /// or its creation (completed records, at least their replay window)
    /// before Redis expires it.
    #[arg(long, default_value = "30d", value_parser = duration_at_most(MAX_DURATION))]
    pub redis_retention: Duration,
    /// Redis only: PEM file of the certificate authorities that a
    /// rediss:// server's certificate must chain to (default: the system's).
    #[arg(long)]
    pub redis_ca_file: Option<PathBuf>,
    /// How long a stored response is replayed (e.g. 2s, 15m, 24h).
    #[arg(long, default_value = "24h", value_parser = duration_at_most(MAX_DURATION))]
    pub replay_ttl: Duration,
    /// After the replay window: reject (410) or reexecute.
    #[arg(long, default_value = "reject", value_parser = parse_policy)]
    pub expiry_policy: ExpiryPolicy,
    /// How long a claim holds a key before a retry may take it over.
    #[arg(long, default_value = "30s", value_parser = duration_at_most(MAX_INTERVAL))]
    pub lease: Duration,
    /// Largest request body read, in bytes (413 above).
    #[arg(long, default_value_t = idemkey::layer::DEFAULT_MAX_REQUEST_BODY)]
    pub max_body_bytes: usize,
    /// Largest response body stored for replay, in bytes; above it the
    /// response is passed through and a retry gets 410.
    #[arg(long, default_value_t = idemkey::layer::DEFAULT_MAX_STORED_RESPONSE)]
    pub max_response_bytes: usize,
}

fn parse_profile(s: &str) -> Result<KeyProfile, String> {
    s.parse()
        .map_err(|e: idemkey_core::UnknownProfile| e.to_string())
}

fn parse_policy(s: &str) -> Result<ExpiryPolicy, String> {
    s.parse()
}

impl FixtureArgs {
    /// Checks what clap cannot: a non-loopback bind needs the explicit
    /// switch.
    pub fn validate(&self) -> Result<(), String> {
        if self.bind.ip().is_loopback() || self.allow_non_loopback {
            return Ok(());
        }
        Err(format!(
            "the fixture has no authentication (one scope for every caller): --bind (IDEMKEY_FIXTURE_BIND) \
             must be a loopback address such as 127.0.0.1:{port} or [::1]:{port}, not {}, \
             unless --allow-non-loopback is given",
            self.bind,
            port = self.bind.port(),
        ))
    }
}

impl ServeArgs {
    /// The load-shedding caps these flags ask for.
    pub fn limits(&self) -> idemkey::load_shed::Limits {
        idemkey::load_shed::Limits {
            max_connections: self.max_connections,
            max_in_flight: self.max_in_flight,
        }
    }

    /// Checks what clap cannot: fault hooks need the explicit environment
    /// switch, and tombstones must outlive the replay window.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_with(std::env::var(ALLOW_TEST_FAULTS_ENV).ok().as_deref())
    }

    /// [`ServeArgs::validate`] with `allow_test_faults` as the value of
    /// `IDEMKEY_ALLOW_TEST_FAULTS` (`None`: unset).
    fn validate_with(&self, allow_test_faults: Option<&str>) -> Result<(), String> {
        self.outbox.validate()?;
        #[cfg(not(feature = "test-faults"))]
        let _ = allow_test_faults;
        #[cfg(feature = "test-faults")]
        if self.test_faults && allow_test_faults != Some("1") {
            return Err(format!(
                "--test-faults is for tests only and needs {ALLOW_TEST_FAULTS_ENV}=1"
            ));
        }
        if self.tombstone_ttl <= self.replay_ttl {
            return Err(format!(
                "--tombstone-ttl (IDEMKEY_TOMBSTONE_TTL, {}) must be longer than --replay-ttl \
                 (IDEMKEY_REPLAY_TTL, {}): after the replay window only the tombstone still \
                 knows the key (410, or 422 for another payload)",
                idemkey::duration::human_duration(self.tombstone_ttl),
                idemkey::duration::human_duration(self.replay_ttl),
            ));
        }
        if self.demo && !self.bind.ip().is_loopback() {
            return Err(format!(
                "--demo (IDEMKEY_DEMO) serves its accounts' tokens without authentication: it \
                 needs a loopback --bind such as 127.0.0.1:{port} or [::1]:{port}, not {}",
                self.bind,
                port = self.bind.port(),
            ));
        }
        if self.sqlite_readers > idemkey::store::sqlite::MAX_READERS {
            return Err(format!(
                "--sqlite-readers (IDEMKEY_SQLITE_READERS, {}) must be at most {}",
                self.sqlite_readers,
                idemkey::store::sqlite::MAX_READERS
            ));
        }
        if self.token_last_used_interval.is_zero() {
            return Err("--token-last-used-interval must be longer than 0".into());
        }
        if self.body_read_timeout.is_zero() {
            return Err("--body-read-timeout must be longer than 0".into());
        }
        if self.pool_size == 0 || self.trim_batch == 0 {
            return Err("--pool-size and --trim-batch must be at least 1".into());
        }
        if self.max_connections == 0 || self.max_in_flight == 0 {
            return Err("--max-connections and --max-in-flight must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey::duration::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "2", "s", "2w", "-1s", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_have_upper_bounds() {
        assert_eq!(parse_duration("3650d"), Ok(MAX_DURATION));
        for too_long in ["3651d", "200000000000000d", "99999999999999999999999s"] {
            let err = parse_duration(too_long).unwrap_err();
            assert!(err.contains("upper bound of 3650d"), "{too_long}: {err}");
        }
        let wait = duration_at_most(MAX_WAIT);
        assert_eq!(wait("60m"), Ok(MAX_WAIT));
        assert!(wait("3600001ms").unwrap_err().contains("upper bound of 1h"));
    }

    #[test]
    fn an_option_past_its_bound_is_refused_naming_both() {
        for (flag, value, bound) in [
            ("--auth-cache-ttl", "200000000000000d", "1h"),
            ("--pool-wait", "2h", "1h"),
            ("--lock-timeout", "25d", "1h"),
            ("--trim-interval", "2d", "1d"),
            ("--replay-ttl", "3651d", "3650d"),
        ] {
            let err = Cli::try_parse_from(["idemkey-server", "serve", flag, value])
                .unwrap_err()
                .to_string();
            assert!(err.contains(flag), "{flag}: {err}");
            assert!(
                err.contains(&format!("upper bound of {bound}")),
                "{flag}: {err}"
            );
        }
        let err = Cli::try_parse_from(["idemkey-server", "fixture", "--lease", "2d"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--lease") && err.contains("upper bound of 1d"),
            "{err}"
        );
    }

    #[test]
    fn serve_defaults_match_the_issue() {
        let cli =
            Cli::try_parse_from(["idemkey-server", "serve", "--database-url", "postgres://x"])
                .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        assert_eq!(args.bind.to_string(), "127.0.0.1:3000");
        assert_eq!(args.key_profile, KeyProfile::Lenient);
        assert_eq!(args.replay_ttl, Duration::from_secs(86_400));
        assert_eq!(args.expiry_policy, ExpiryPolicy::Reject);
        assert_eq!(args.body_read_timeout, Duration::from_secs(10));
        assert!(args.validate().is_ok());
    }

    fn serve(args: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from([&["idemkey-server", "serve"], args].concat()).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        *args
    }

    #[test]
    fn the_tombstone_must_outlive_the_replay_window() {
        for (replay, tombstone) in [("1h", "1h"), ("2d", "1d")] {
            let err = serve(&["--replay-ttl", replay, "--tombstone-ttl", tombstone])
                .validate_with(None)
                .unwrap_err();
            assert!(err.contains("must be longer than --replay-ttl"), "{err}");
        }
        let ok = serve(&["--replay-ttl", "1h", "--tombstone-ttl", "61m"]);
        assert_eq!(ok.validate_with(None), Ok(()));
    }

    #[test]
    fn demo_mode_needs_a_loopback_bind() {
        for bind in ["0.0.0.0:3000", "[::]:3000", "192.0.2.1:3000"] {
            let err = serve(&["--demo", "--bind", bind])
                .validate_with(None)
                .unwrap_err();
            assert!(err.contains("needs a loopback --bind"), "{bind}: {err}");
        }
        for bind in ["127.0.0.1:3000", "127.0.0.2:0", "[::1]:3000"] {
            assert_eq!(
                serve(&["--demo", "--bind", bind]).validate_with(None),
                Ok(()),
                "{bind}"
            );
        }
        assert_eq!(
            serve(&["--bind", "0.0.0.0:3000"]).validate_with(None),
            Ok(())
        );
    }

    #[test]
    fn the_fixture_needs_a_loopback_bind_unless_told_otherwise() {
        let fixture = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["idemkey-server", "fixture"], args].concat()).unwrap();
            let Command::Fixture(args) = cli.command else {
                panic!("fixture")
            };
            args
        };
        assert_eq!(fixture(&[]).validate(), Ok(()));
        for bind in ["0.0.0.0:3001", "[::]:3001", "192.0.2.1:3001"] {
            let err = fixture(&["--bind", bind]).validate().unwrap_err();
            assert!(err.contains("--allow-non-loopback"), "{bind}: {err}");
            assert_eq!(
                fixture(&["--bind", bind, "--allow-non-loopback"]).validate(),
                Ok(()),
                "{bind}"
            );
        }
        assert_eq!(fixture(&["--bind", "[::1]:0"]).validate(), Ok(()));
    }

    #[test]
    fn load_shedding_caps_default_and_must_be_positive() {
        let parse = serve;
        let args = parse(&[]);
        assert_eq!((args.max_connections, args.max_in_flight), (512, 256));
        assert_eq!(args.limits(), idemkey::load_shed::Limits::default());
        for zero in [["--max-connections", "0"], ["--max-in-flight", "0"]] {
            let err = parse(&zero).validate_with(None).unwrap_err();
            assert!(err.contains("at least 1"), "{err}");
        }
    }

    #[test]
    fn sqlite_readers_default_to_two_and_are_bounded() {
        assert_eq!(serve(&[]).sqlite_readers, 2);
        for ok in ["0", "64"] {
            assert_eq!(serve(&["--sqlite-readers", ok]).validate_with(None), Ok(()));
        }
        let err = serve(&["--sqlite-readers", "65"])
            .validate_with(None)
            .unwrap_err();
        assert!(err.contains("must be at most 64"), "{err}");
    }

    #[cfg(feature = "test-faults")]
    #[test]
    fn test_faults_need_the_environment_switch() {
        let cli = Cli::try_parse_from(["idemkey-server", "serve", "--test-faults"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        for refused in [None, Some(""), Some("0"), Some("true")] {
            let err = args.validate_with(refused).unwrap_err();
            assert!(err.contains(ALLOW_TEST_FAULTS_ENV), "{refused:?}: {err}");
        }
        assert_eq!(args.validate_with(Some("1")), Ok(()));
    }

    #[test]
    fn without_test_faults_the_switch_does_not_matter() {
        let cli = Cli::try_parse_from(["idemkey-server", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        for allow in [None, Some("1")] {
            assert_eq!(args.validate_with(allow), Ok(()), "{allow:?}");
        }
    }
}
