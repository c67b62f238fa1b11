//! Redis and Redis Cluster: a records store for the idempotency layer's
//! **lease mode** only.
//!
//! Each record is one hash; claim, read, take-over, complete and release are
//! Lua scripts (`lua/*.lua`), each atomic on the node that owns the key,
//! state-checked and claim-token fenced like the SQL stores' statements,
//! with Redis's own clock (`TIME` inside the script) deciding leases and
//! windows. Key expiry (`PEXPIREAT`) forgets records, so
//! [`Records::trim`](crate::idempotency::Records::trim) has nothing to do
//! and reports zero.
//!
//! Never the store of `in_transaction` or of an application's own
//! transaction: those write the effect and its record in one database
//! transaction, which Redis cannot join. It holds no outbox either: the
//! outbox calls of [`Db`](crate::Db) answer [`StoreError::Unsupported`] on
//! Redis, and an application that keeps its effects in a transaction (the
//! order service, the simulator) refuses a Redis URL when it opens.
//!
//! # Durability
//! Redis acknowledges a write once it is in the master's memory. With
//! `appendonly yes` and `appendfsync always` a completion survives a crash
//! of that master (each write fsynced before the reply); `everysec` may
//! lose the last second. Replication is asynchronous: a failover may promote
//! a replica that never received the claim or the completion, and a retry
//! then runs the handler again. [`RedisSettings::wait_replicas`] sends
//! `WAIT n timeout` after each claim and completion (pipelined with the
//! script, on the same connection), so the request goes on only once `n`
//! replicas hold the write. If they do not within the timeout the call
//! fails with [`StoreError::Unconfirmed`]: a claim answers 503 before the
//! handler runs; a completion answers 503 too, never an acknowledgement a
//! failover could take back (the client's retry replays the stored answer,
//! or runs the handler again after the lease if a failover lost it). A
//! pipeline that fails outright (its master died with it in flight, a
//! timeout) is unconfirmed too: the write may hold on a node a failover
//! drops.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind, TlsCertificates};
use sha2::{Digest, Sha256};

use super::{PoolStatus, StoreError};
use crate::idempotency::RecordKey;

mod backend;
mod records;

pub(crate) use backend::OPENER;

pub(crate) use crate::store::settings::RedisSettings;

/// The connection: one multiplexed connection to a single node (reconnected
/// on failure), or a cluster connection that follows `MOVED` and `ASK`.
#[derive(Clone)]
enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A Redis node or cluster.
#[derive(Clone)]
pub struct RedisDb {
    conn: Conn,
    settings: RedisSettings,
}

impl std::fmt::Debug for RedisDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDb")
            .field("cluster", &matches!(self.conn, Conn::Cluster(_)))
            .field("settings", &self.settings)
            .finish()
    }
}

/// Whether `url` names a Redis node or cluster.
pub fn is_redis_url(url: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "redis+cluster://",
        "rediss+cluster://",
    ]
    .iter()
    .any(|scheme| url.starts_with(scheme))
}

fn unavailable(e: &RedisError) -> StoreError {
    // The error names commands and addresses, never the URL's password.
    StoreError::Unavailable(format!("redis: {e}"))
}

/// The seed URLs of `redis+cluster://[user:pass@]host:port,host:port[/]`
/// (`rediss+cluster://` for TLS): one `redis://` URL per seed, each with
/// the credentials.
fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else {
        ("rediss", url.strip_prefix("rediss+cluster://")?)
    };
    let rest = rest.trim_end_matches('/');
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{auth}{h}"))
        .collect();
    (!seeds.is_empty()).then_some(seeds)
}

impl RedisDb {
    /// Connects to the node (`redis://`, `rediss://`) or the cluster
    /// (`redis+cluster://host:port,host:port`, `rediss+cluster://…`) that
    /// `url` names, and checks that it answers.
    pub async fn connect(url: &str, settings: &RedisSettings) -> Result<Self, StoreError> {
        // rustls is built with ring only; make it the process default so
        // rediss:// works whatever else links rustls. rustls 0.23.48
        // deprecates ring's provider (no post-quantum groups) with no other
        // way to name it; moving to aws-lc-rs is a decision of its own.
        #[allow(deprecated)]
        let ring = rustls::crypto::ring::default_provider();
        let _ = ring.install_default();
        // The parser's message never repeats the URL (nor its password).
        let invalid = |e: RedisError| StoreError::Unavailable(format!("invalid Redis URL: {e}"));
        let certs = match &settings.ca_file {
            Some(path) => Some(TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(path).map_err(|e| {
                    StoreError::Unavailable(format!("cannot read {}: {e}", path.display()))
                })?),
            }),
            None => None,
        };
        let conn = if let Some(seeds) = cluster_seeds(url) {
            let mut builder = ClusterClient::builder(seeds)
                .connection_timeout(settings.connect_timeout)
                .response_timeout(settings.response_timeout);
            if let Some(certs) = certs {
                builder = builder.certs(certs);
            }
            let client = builder.build().map_err(invalid)?;
            Conn::Cluster(
                client
                    .get_async_connection()
                    .await
                    .map_err(|e| unavailable(&e))?,
            )
        } else if url.contains("+cluster://") {
            return Err(StoreError::Unavailable(
                "redis+cluster:// needs host:port seeds, comma-separated".into(),
            ));
        } else {
            let client = match certs {
                Some(certs) => redis::Client::build_with_tls(url, certs),
                None => redis::Client::open(url),
            }
            .map_err(invalid)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(settings.connect_timeout))
                .set_response_timeout(Some(settings.response_timeout));
            Conn::Node(
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(|e| unavailable(&e))?,
            )
        };
        let db = Self {
            conn,
            settings: settings.clone(),
        };
        db.ping().await?;
        Ok(db)
    }

    /// The settings.
    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// Runs `invocation` on the master that owns its key. With `durable`
    /// and [`RedisSettings::wait_replicas`], `WAIT n timeout` follows in
    /// the same pipeline, so it runs on the same connection to the same
    /// master right after the script (a `WAIT` sent apart could be retried
    /// on another node after a failover and count that node's replicas);
    /// fewer replicas than `n` in time fail the call.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        durable: bool,
    ) -> Result<T, StoreError> {
        let wanted = self.settings.wait_replicas;
        if !durable || wanted == 0 {
            let result = match self.conn.clone() {
                Conn::Node(mut c) => invocation.invoke_async(&mut c).await,
                Conn::Cluster(mut c) => invocation.invoke_async(&mut c).await,
            };
            return result.map_err(|e| unavailable(&e));
        }
        let timeout = u64::try_from(self.settings.wait_timeout.as_millis()).unwrap_or(u64::MAX);
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(wanted)
            .arg(timeout.max(1));
        let mut result = self.query::<(T, i64)>(&pipe).await;
        if matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            // Pipelines do not load scripts: load it, then send again.
            let loaded = match self.conn.clone() {
                Conn::Node(mut c) => invocation.load_async(&mut c).await,
                Conn::Cluster(mut c) => invocation.load_async(&mut c).await,
            };
            loaded.map_err(|e| unavailable(&e))?;
            result = self.query::<(T, i64)>(&pipe).await;
        }
        // The pipeline failed after it may have run (a master that died
        // with it in flight, a timeout): the write may hold on a node a
        // failover then drops, so it is no more confirmed than a short
        // `WAIT`. (A completion reported unavailable would still be
        // acknowledged to the client in lease mode.)
        let (value, acknowledged) = result.map_err(|e| {
            StoreError::Unconfirmed(format!("redis: the write's fate is unknown: {e}"))
        })?;
        if acknowledged < i64::from(wanted) {
            return Err(StoreError::Unconfirmed(format!(
                "redis: WAIT: {acknowledged} of {wanted} replicas acknowledged the write in time"
            )));
        }
        Ok(value)
    }

    async fn query<T: redis::FromRedisValue>(&self, pipe: &Pipeline) -> RedisResult<T> {
        match self.conn.clone() {
            Conn::Node(mut c) => pipe.query_async(&mut c).await,
            Conn::Cluster(mut c) => pipe.query_async(&mut c).await,
        }
    }

    /// Checks that the node (on a cluster: a node) answers `PING`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let cmd = redis::cmd("PING");
        let reply = match self.conn.clone() {
            Conn::Node(mut c) => c.req_packed_command(&cmd).await,
            Conn::Cluster(mut c) => c.req_packed_command(&cmd).await,
        };
        reply.map(drop).map_err(|e| unavailable(&e))
    }

    /// Redis has no migrations: records are self-describing hashes.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Redis has no migrations: nothing is ever pending.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    /// One multiplexed connection (per node, on a cluster).
    pub fn pool_status(&self) -> PoolStatus {
        PoolStatus {
            max_size: 1,
            size: 1,
            available: 1,
            waiting: 0,
        }
    }

    /// Connections close when the last clone is dropped.
    pub fn close(&self) {}
}

/// The Redis key of a record: `idemkey:{TAG}:` and the length-prefixed
/// scope, operation and key, where `TAG` is a hash of the three. The tag
/// comes first, so it is the key's cluster hash tag: records spread evenly
/// over the slots whatever braces a client puts in its keys.
pub(crate) fn record_name(key: &RecordKey) -> Vec<u8> {
    let (scope, operation, k) = (key.scope.as_str(), key.operation.as_str(), key.key.as_str());
    let mut hash = Sha256::new();
    for part in [scope, operation, k] {
        hash.update(part.len().to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let tag: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "idemkey:{{{tag}}}:{}:{scope}:{}:{operation}:{k}",
        scope.len(),
        operation.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::{IdempotencyKey, OperationId};

    #[test]
    fn cluster_urls_become_one_seed_each_with_the_credentials() {
        assert_eq!(
            cluster_seeds("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001/"),
            Some(vec![
                "redis://u:p@10.0.0.1:7000".to_owned(),
                "redis://u:p@10.0.0.2:7001".to_owned()
            ])
        );
        assert_eq!(
            cluster_seeds("rediss+cluster://h:1"),
            Some(vec!["rediss://h:1".to_owned()])
        );
        assert_eq!(cluster_seeds("redis+cluster://"), None);
        assert_eq!(cluster_seeds("redis://h:1"), None);
    }

    #[test]
    fn record_names_are_unambiguous_and_carry_their_own_hash_tag() {
        let key = |scope: &str, op: &'static str, k: &str| RecordKey {
            scope: crate::idempotency::Scope::new(scope).unwrap(),
            operation: OperationId::from_static(op),
            key: IdempotencyKey::parse(
                format!("\"{k}\"").as_bytes(),
                idemkey_core::KeyProfile::Lenient,
            )
            .unwrap(),
        };
        let a = record_name(&key("a:1", "op:v1", "{k}"));
        let b = record_name(&key("a", "1:op:v1", "{k}"));
        assert_ne!(a, b);
        let text = String::from_utf8(a).unwrap();
        assert!(text.starts_with("idemkey:{"), "{text}");
        // The first braces are ours, so the client's `{k}` is not the tag.
        let tag = &text[text.find('{').unwrap() + 1..text.find('}').unwrap()];
        assert_eq!(tag.len(), 16);
        assert!(tag.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
