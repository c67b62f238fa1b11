//! The records protocol on Redis: one Lua script per call (`lua/`), sent
//! by `EVALSHA` (loaded on `NOSCRIPT`), each one atomic step on the node
//! owning the record.
//!
//! A record's hash holds `fp` (the fingerprint's 32 bytes), `claim`,
//! `status`, `created`, `lease_until`, `replay_until` (milliseconds of the
//! store's clock), and for a completion `rs` (status), `rh` (headers as
//! JSON), `rb` (body; absent when not stored) and `rid` (resource id).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use idemkey_core::{Fingerprint, UnixMillis};
use redis::Script;
use uuid::Uuid;

use super::{RedisDb, record_name};
use crate::duration::millis;
use crate::idempotency::{
    ClaimToken, Claimed, NewClaim, Read, Record, RecordKey, Records, StoredResponse, TrimReport,
    state_name, stored_from_columns,
};
use crate::store::{StoreError, decode_response};

/// A script from `lua/`, after the shared clock prelude (`lua/clock.lua`).
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(concat!(include_str!("lua/clock.lua"), include_str!($file))))
    };
}

static CLAIM: LazyLock<Script> = script!("lua/claim.lua");
static READ: LazyLock<Script> = script!("lua/read.lua");
static TAKE_OVER: LazyLock<Script> = script!("lua/take_over.lua");
static COMPLETE: LazyLock<Script> = script!("lua/complete.lua");
static RELEASE: LazyLock<Script> = script!("lua/release.lua");

impl Records for RedisDb {
    async fn claim(&self, key: &RecordKey, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let name = record_name(key);
        let reply: Vec<Vec<u8>> = self
            .invoke(
                CLAIM
                    .key(&name)
                    .arg(&claim.fingerprint.as_bytes()[..])
                    .arg(claim.token.0.to_string())
                    .arg(millis(claim.lease))
                    .arg(millis(self.settings.retention)),
                true,
            )
            .await?;
        let (tag, rest) = reply
            .split_first()
            .ok_or_else(|| malformed("empty claim reply"))?;
        let read = read_from_reply(rest)?;
        // A client that resent the script after losing its reply finds
        // its own claim: that is a win, not someone else's request.
        let won = tag.as_slice() == b"won"
            || read
                .record
                .as_ref()
                .is_some_and(|r| r.token == claim.token && state_name(&r.stored) == "in_flight");
        if won {
            Ok(Claimed::Won)
        } else {
            Ok(Claimed::Taken(read))
        }
    }

    async fn read(&self, key: &RecordKey) -> Result<Read, StoreError> {
        let reply: Vec<Vec<u8>> = self.invoke(&READ.key(record_name(key)), false).await?;
        read_from_reply(&reply)
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        previous: &Record,
        claim: &NewClaim,
    ) -> Result<bool, StoreError> {
        let name = record_name(key);
        let done: i64 = self
            .invoke(
                TAKE_OVER
                    .key(&name)
                    .arg(&claim.fingerprint.as_bytes()[..])
                    .arg(claim.token.0.to_string())
                    .arg(millis(claim.lease))
                    .arg(millis(self.settings.retention))
                    .arg(previous.token.0.to_string())
                    .arg(state_name(&previous.stored)),
                true,
            )
            .await?;
        Ok(done == 1)
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: ClaimToken,
        response: &StoredResponse,
        replay_ttl: Duration,
        resource_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let name = record_name(key);
        let body = response.body.as_deref();
        let done: i64 = self
            .invoke(
                COMPLETE
                    .key(&name)
                    .arg(token.0.to_string())
                    .arg(millis(replay_ttl))
                    .arg(millis(self.settings.retention))
                    .arg(response.status)
                    .arg(response.headers_json())
                    .arg(if body.is_some() { "1" } else { "0" })
                    .arg(body.unwrap_or_default())
                    .arg(if resource_id.is_some() { "1" } else { "0" })
                    .arg(resource_id.unwrap_or_default()),
                true,
            )
            .await?;
        Ok(done == 1)
    }

    async fn release(&self, key: &RecordKey, token: ClaimToken) -> Result<bool, StoreError> {
        let done: i64 = self
            .invoke(
                RELEASE.key(record_name(key)).arg(token.0.to_string()),
                false,
            )
            .await?;
        Ok(done == 1)
    }

    /// Nothing to do: every record carries its expiry (`PEXPIREAT`), set by
    /// the script that wrote it, and Redis deletes it then.
    async fn trim(&self, _retention: Duration, _batch: u32) -> Result<TrimReport, StoreError> {
        Ok(TrimReport::default())
    }

    fn expires_records(&self) -> bool {
        true
    }
}

fn malformed(what: &str) -> StoreError {
    StoreError::Corrupt(format!("malformed Redis record: {what}"))
}

/// Reads `{now, field, value, ...}` (see `lua/read.lua`).
fn read_from_reply(reply: &[Vec<u8>]) -> Result<Read, StoreError> {
    let (now, fields) = reply.split_first().ok_or_else(|| malformed("no clock"))?;
    let now = UnixMillis(number(now).ok_or_else(|| malformed("clock"))?);
    if fields.is_empty() {
        return Ok(Read { now, record: None });
    }
    let fields: HashMap<&[u8], &[u8]> = fields
        .chunks_exact(2)
        .map(|pair| (pair[0].as_slice(), pair[1].as_slice()))
        .collect();
    let field = |name: &str| fields.get(name.as_bytes()).copied();
    let text = |name: &str| field(name).and_then(|v| std::str::from_utf8(v).ok());
    let time = |name: &str| field(name).and_then(number).map(UnixMillis);
    let fingerprint = field("fp")
        .and_then(|v| <[u8; 32]>::try_from(v).ok())
        .map(Fingerprint::from_bytes)
        .ok_or_else(|| malformed("fingerprint"))?;
    let token = text("claim")
        .and_then(|t| Uuid::parse_str(t).ok())
        .ok_or_else(|| malformed("claim"))?;
    let state = text("status").ok_or_else(|| malformed("status"))?;
    let (lease_until, replay_until) = (time("lease_until"), time("replay_until"));
    let status = field("rs")
        .map(|s| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| malformed("response status"))
        })
        .transpose()?;
    let headers = field("rh")
        .map(|h| std::str::from_utf8(h).map_err(|_| malformed("response headers")))
        .transpose()?;
    let response = decode_response(status, headers, field("rb").map(<[u8]>::to_vec))?;
    Ok(Read {
        now,
        record: Some(Record {
            stored: stored_from_columns(state, fingerprint, lease_until, replay_until),
            token: ClaimToken(token),
            response,
            resource_id: text("rid").map(str::to_owned),
            created_at: time("created").unwrap_or(now),
            replay_until,
        }),
    })
}

fn number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}
