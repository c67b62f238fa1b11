//! The HTTP bad-input sweep: raw requests a well-behaved client never
//! sends. Each must get its documented answer, store nothing, leave the
//! server's memory bounded, and the server must keep serving.

use std::path::Path;
use std::time::{Duration, Instant};

use idemkey_core::Problem;
use idemkey_testkit::PgCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::checker::Report;
use crate::kit::Size;
use crate::servers::{ServerSet, create_account, rss_kib, server_bin};

/// What came back on a raw connection.
#[derive(Debug, Default)]
struct Raw {
    status: Option<u16>,
    head: String,
    body: String,
    /// The server closed the connection (EOF or reset) before the deadline.
    closed: bool,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn code(&self) -> Option<String> {
        Problem::from_json(&self.body).and_then(|p| p.code)
    }
}

/// Sends `bytes` on a new connection and reads the answer until the server
/// closes or `wait` passes.
async fn raw(port: u16, bytes: &[u8], wait: Duration) -> Raw {
    let mut out = Raw::default();
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return out;
    };
    // The server may answer (and close) before taking every byte.
    let _ = stream.write_all(bytes).await;
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                out.closed = true;
                break;
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    if let Some((head, body)) = text.split_once("\r\n\r\n") {
        out.status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        out.head = head.to_owned();
        out.body = body.to_owned();
    } else {
        out.head = text;
    }
    out
}

struct Request {
    method: &'static str,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Request {
    fn post(token: &str, key: &str, body: &str) -> Self {
        Self {
            method: "POST",
            path: "/orders".into(),
            headers: vec![
                (
                    "authorization".into(),
                    format!("Bearer {token}").into_bytes(),
                ),
                ("idempotency-key".into(), key.as_bytes().to_vec()),
                ("content-type".into(), b"application/json".to_vec()),
            ],
            body: body.as_bytes().to_vec(),
        }
    }

    fn get(token: &str, path: &str) -> Self {
        Self {
            method: "GET",
            path: path.into(),
            headers: vec![(
                "authorization".into(),
                format!("Bearer {token}").into_bytes(),
            )],
            body: Vec::new(),
        }
    }

    fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| n != name);
        self
    }

    fn set(self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        let mut r = self.without(name);
        r.headers.push((name.into(), value.into()));
        r
    }

    fn add(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The bytes, with `Content-Length` unless one was set and
    /// `Connection: close`.
    fn bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "{} {} HTTP/1.1\r\nhost: 127.0.0.1\r\n",
            self.method, self.path
        )
        .into_bytes();
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        let has_framing = self
            .headers
            .iter()
            .any(|(n, _)| n == "content-length" || n == "transfer-encoding");
        if !has_framing && (self.method == "POST" || !self.body.is_empty()) {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"connection: close\r\n\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// What a case must get.
#[derive(Clone, Copy)]
enum Expect {
    /// This status and problem code.
    Problem(u16, &'static str),
    /// 400 `request-invalid` with a field error at this JSON pointer whose
    /// detail contains this text.
    Field(&'static str, &'static str),
    /// A 4xx from the HTTP layer (hyper), or the connection closed: no
    /// handler ran.
    Rejected,
}

const BODY: &str = r#"{"sku":"LIBRO-TS","quantity":2}"#;

fn cases(token: &str) -> Vec<(&'static str, Request, Expect)> {
    use Expect::{Field, Problem as P, Rejected};
    let key = || format!("\"{}\"", uuid::Uuid::new_v4());
    let post = |body: &str| Request::post(token, &key(), body);
    let nested_arrays = format!("{}{}", "[".repeat(4000), "]".repeat(4000));
    let nested_objects = format!("{}1{}", r#"{"sku":"#.repeat(900), "}".repeat(900));
    vec![
        (
            "oversize header (1 MiB)",
            post(BODY).add("x-junk", vec![b'a'; 1 << 20]),
            Rejected,
        ),
        (
            "200 repeated junk headers",
            {
                let mut r = post(BODY);
                for i in 0..200 {
                    r = r.add("x-junk", format!("{i}"));
                }
                r
            },
            Rejected,
        ),
        (
            "two Idempotency-Key lines",
            post(BODY).add("idempotency-key", key()),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "empty key",
            post(BODY).set("idempotency-key", "\"\""),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "missing key",
            post(BODY).without("idempotency-key"),
            P(400, "idempotency-key-missing"),
        ),
        (
            "key with a control byte",
            post(BODY).set("idempotency-key", b"\"ab\x01cd\"".to_vec()),
            Rejected,
        ),
        (
            "key with a tab",
            post(BODY).set("idempotency-key", b"\"ab\tcd\"".to_vec()),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "key with DEL",
            post(BODY).set("idempotency-key", b"\"ab\x7fcd\"".to_vec()),
            Rejected,
        ),
        (
            "key with UTF-8",
            post(BODY).set("idempotency-key", "\"clé-ñ\"".as_bytes().to_vec()),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "key with Latin-1 byte",
            post(BODY).set("idempotency-key", b"\"cl\xe9\"".to_vec()),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "key of 256 characters",
            post(BODY).set("idempotency-key", format!("\"{}\"", "k".repeat(256))),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "unterminated sf-string key",
            post(BODY).set("idempotency-key", "\"abc"),
            P(400, "idempotency-key-invalid"),
        ),
        (
            "malformed JSON",
            post(r#"{"sku":"#),
            P(400, "request-invalid"),
        ),
        (
            "JSON with trailing garbage",
            post(&format!("{BODY}xyz")),
            P(400, "request-invalid"),
        ),
        (
            "deeply nested arrays (4000)",
            post(&nested_arrays),
            P(400, "request-invalid"),
        ),
        (
            "deeply nested objects (900)",
            post(&nested_objects),
            P(400, "request-invalid"),
        ),
        (
            "extra member",
            post(r#"{"sku":"LIBRO-TS","quantity":2,"price":0}"#),
            P(400, "request-invalid"),
        ),
        (
            "duplicate member",
            post(r#"{"sku":"LIBRO-TS","quantity":2,"quantity":20}"#),
            Field("/quantity", "must appear only once"),
        ),
        (
            "quantity 0",
            post(r#"{"sku":"LIBRO-TS","quantity":0}"#),
            P(400, "request-invalid"),
        ),
        (
            "quantity as string",
            post(r#"{"sku":"LIBRO-TS","quantity":"2"}"#),
            P(400, "request-invalid"),
        ),
        (
            "quantity 2.5",
            post(r#"{"sku":"LIBRO-TS","quantity":2.5}"#),
            P(400, "request-invalid"),
        ),
        (
            "quantity 1e400",
            post(r#"{"sku":"LIBRO-TS","quantity":1e400}"#),
            P(400, "request-invalid"),
        ),
        (
            "sku with NUL escape",
            post(r#"{"sku":"LIBRO\u0000","quantity":2}"#),
            P(400, "request-invalid"),
        ),
        (
            "lone surrogate",
            post(r#"{"sku":"\ud800","quantity":2}"#),
            P(400, "request-invalid"),
        ),
        (
            "body not UTF-8",
            Request {
                body: b"{\"sku\":\"\xff\xfe\",\"quantity\":2}".to_vec(),
                ..post(BODY)
            },
            P(400, "request-invalid"),
        ),
        ("empty body", post(""), P(400, "request-invalid")),
        (
            "body of 9000 bytes",
            post(&format!(
                "{{\"sku\":\"{}\",\"quantity\":2}}",
                "A".repeat(8980)
            )),
            P(413, "payload-too-large"),
        ),
        (
            "Content-Length of 10 MB, no body",
            post(BODY).set("content-length", "10000000"),
            P(413, "payload-too-large"),
        ),
        (
            "chunked body of 9000 bytes",
            {
                let big = "A".repeat(9000);
                let chunked = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
                Request {
                    body: chunked.into_bytes(),
                    ..post(BODY)
                }
                .set("transfer-encoding", "chunked")
            },
            P(413, "payload-too-large"),
        ),
        (
            "Content-Length and Transfer-Encoding",
            post(BODY)
                .set("transfer-encoding", "chunked")
                .add("content-length", "31"),
            Rejected,
        ),
        (
            "two Content-Length values",
            post(BODY)
                .add("content-length", "31")
                .add("content-length", "5"),
            Rejected,
        ),
        (
            "text/plain",
            post(BODY).set("content-type", "text/plain"),
            P(415, "unsupported-media-type"),
        ),
        (
            "no Content-Type",
            post(BODY).without("content-type"),
            P(415, "unsupported-media-type"),
        ),
        (
            "form content type",
            post(BODY).set("content-type", "application/x-www-form-urlencoded"),
            P(415, "unsupported-media-type"),
        ),
        (
            "application/jsonp",
            post(BODY).set("content-type", "application/jsonp"),
            P(415, "unsupported-media-type"),
        ),
        (
            "invalid token",
            Request::post("not-a-token", &key(), BODY),
            P(401, "unauthorized"),
        ),
        (
            "no Authorization",
            post(BODY).without("authorization"),
            P(401, "unauthorized"),
        ),
        (
            "Basic credentials",
            post(BODY).set("authorization", "Basic dXNlcjpwYXNz"),
            P(401, "unauthorized"),
        ),
        (
            "token with non-ASCII bytes",
            post(BODY).set("authorization", b"Bearer \xff\xfe".to_vec()),
            P(401, "unauthorized"),
        ),
        (
            "PUT /orders",
            Request {
                method: "PUT",
                ..post(BODY)
            },
            P(405, "method-not-allowed"),
        ),
        (
            "unknown path",
            Request::get(token, "/../../etc/passwd"),
            Rejected,
        ),
        (
            "lookup with bad token",
            Request::get("nope", "/operations/abc"),
            P(401, "unauthorized"),
        ),
        (
            "order with a malformed id",
            Request::get(token, "/orders/not-a-uuid"),
            P(404, "not-found"),
        ),
    ]
}

fn verdict(name: &str, got: &Raw, expect: Expect) -> Option<String> {
    match expect {
        Expect::Problem(status, code) => {
            if got.status == Some(status)
                && got.code().as_deref() == Some(code)
                && got.header("content-type") == Some("application/problem+json")
            {
                None
            } else {
                Some(format!(
                    "{name}: wanted {status} {code}, got {:?} {:?} {:?}",
                    got.status,
                    got.code(),
                    got.body.chars().take(200).collect::<String>()
                ))
            }
        }
        Expect::Field(pointer, detail) => {
            let field = serde_json::from_str::<serde_json::Value>(&got.body)
                .ok()
                .and_then(|v| v["errors"].as_array().cloned())
                .unwrap_or_default()
                .into_iter()
                .any(|e| {
                    e["pointer"] == pointer
                        && e["detail"].as_str().is_some_and(|d| d.contains(detail))
                });
            if got.status == Some(400) && got.code().as_deref() == Some("request-invalid") && field
            {
                None
            } else {
                Some(format!(
                    "{name}: wanted 400 request-invalid at {pointer} ({detail}), got {:?} {:?}",
                    got.status,
                    got.body.chars().take(200).collect::<String>()
                ))
            }
        }
        Expect::Rejected => match got.status {
            Some(s) if (400..500).contains(&s) => None,
            None if got.closed => None,
            other => Some(format!(
                "{name}: wanted a 4xx or a closed connection, got {other:?} {:?}",
                got.body.chars().take(200).collect::<String>()
            )),
        },
    }
}

/// How long the sweep's server waits for a request body
/// (`--body-read-timeout`): the connections that stop half-way through
/// their body must be answered (400 `request-invalid`) or closed by then.
fn body_read_timeout(size: Size) -> Duration {
    match size {
        Size::Small => Duration::from_secs(2),
        Size::Large => Duration::from_secs(10),
    }
}

/// Runs the sweep against one server on a fresh database.
pub fn run(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    run_skipping(size, seed, dir, &[])
}

/// [`run`], without the checks named in `skip` (case names, or
/// `slow-body`); each skipped check is listed in the report's notes.
pub fn run_skipping(size: Size, _seed: u64, dir: &Path, skip: &[&str]) -> Result<Report, String> {
    let bin = server_bin().map_err(|e| format!("server binary: {e}"))?;
    let pg = PgCluster::start().map_err(|e| format!("PostgreSQL: {e}"))?;
    let url = pg
        .create_database("chaos")
        .map_err(|e| format!("createdb: {e}"))?;
    let (_, alice) = create_account(&bin, &url, "alice").map_err(|e| e.to_string())?;
    let (_, bob) = create_account(&bin, &url, "bob").map_err(|e| e.to_string())?;
    let body_timeout = body_read_timeout(size);
    let server_args = vec![
        "--body-read-timeout".to_owned(),
        format!("{}ms", body_timeout.as_millis()),
    ];
    let servers = ServerSet::start(&bin, &url, 1, &server_args, dir).map_err(|e| e.to_string())?;
    let port: u16 = servers.bases()[0]
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or("no port")?;
    let pid = servers.pid(0).ok_or("no server process")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Orders and records; a failed read is a violation where it is used,
    // never a value two failures could share.
    let counts = || -> Result<(u64, u64), String> {
        let out = pg
            .psql(
                "chaos",
                "SELECT (SELECT count(*) FROM orders) || '/' || (SELECT count(*) FROM idempotency_records)",
            )
            .map_err(|e| format!("cannot count rows: {e}"))?;
        parse_counts(&out).ok_or_else(|| format!("cannot count rows: psql said {out:?}"))
    };
    let mut report = Report::default();
    let started = Instant::now();
    let rounds = match size {
        Size::Small => 3,
        Size::Large => 60,
    };
    let slow_wait = match size {
        Size::Small => Duration::from_secs(13),
        Size::Large => Duration::from_secs(40),
    };
    rt.block_on(async {
        let wait = Duration::from_secs(10);
        // Warm up, then measure memory and rows.
        let ok = raw(
            port,
            &Request::post(&alice, "\"warm-up\"", BODY).bytes(),
            wait,
        )
        .await;
        if ok.status != Some(201) {
            report
                .violations
                .push(format!("warm-up order: {:?} {}", ok.status, ok.body));
        }
        let rss_before = rss_kib(pid);
        if rss_before.is_none() {
            report.violations.push(format!(
                "cannot read the server's memory from /proc/{pid}/status"
            ));
        }
        let rows_before = counts();
        if let Err(err) = &rows_before {
            report.violations.push(format!("before the sweep: {err}"));
        }

        // Slow clients, concurrently with the sweep: headers that never end,
        // and bodies that stop half-way and then trickle.
        let slow_headers = tokio::spawn(async move {
            let mut handles = Vec::new();
            for _ in 0..20 {
                handles.push(tokio::spawn(async move {
                    let t0 = Instant::now();
                    let r = raw(
                        port,
                        b"POST /orders HTTP/1.1\r\nhost: x\r\nx-slow: ",
                        slow_wait,
                    )
                    .await;
                    (r.closed || r.status.is_some(), t0.elapsed())
                }));
            }
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap_or((false, Duration::ZERO)));
            }
            out
        });
        let slow_body_req =
            Request::post(&alice, "\"slow-body\"", BODY).set("content-length", "40");
        let mut head = slow_body_req.bytes();
        head.truncate(head.len() - BODY.len());
        head.extend_from_slice(&BODY.as_bytes()[..10]);
        let slow_bodies = tokio::spawn(async move {
            let mut handles = Vec::new();
            for _ in 0..20 {
                let head = head.clone();
                handles.push(tokio::spawn(async move {
                    let t0 = Instant::now();
                    let r = raw(port, &head, slow_wait).await;
                    // Answered with the core's 400 (and closed), or closed.
                    let answered = match r.status {
                        Some(400) => r.code().as_deref() == Some("request-invalid") && r.closed,
                        Some(_) => false,
                        None => r.closed,
                    };
                    (answered, t0.elapsed())
                }));
            }
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap_or((false, Duration::ZERO)));
            }
            out
        });

        let mut sent = 0u64;
        for round in 0..rounds {
            for (name, request, expect) in cases(&alice) {
                if skip.contains(&name) {
                    continue;
                }
                let got = raw(port, &request.bytes(), wait).await;
                sent += 1;
                if round == 0 {
                    if let Some(v) = verdict(name, &got, expect) {
                        report.violations.push(v);
                    }
                    if matches!(expect, Expect::Rejected) {
                        report.notes.push(format!(
                            "{name}: {}",
                            got.status
                                .map_or("connection closed".into(), |s| s.to_string())
                        ));
                    }
                }
            }
            // A body that stops half-way: the client closes its side.
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await {
                let mut bytes = Request::post(&alice, "\"half-body\"", BODY).bytes();
                bytes.truncate(bytes.len() - BODY.len() / 2);
                let _ = s.write_all(&bytes).await;
                let _ = s.shutdown().await;
                let mut sink = Vec::new();
                let _ = tokio::time::timeout(wait, s.read_to_end(&mut sink)).await;
                sent += 1;
            }
        }
        report.fault("hostile-requests", sent);
        match (&rows_before, counts()) {
            (_, Err(err)) => report.violations.push(format!("after the sweep: {err}")),
            (Ok(before), Ok(after)) if *before != after => report.violations.push(format!(
                "rejected requests stored rows: orders/records {before:?} -> {after:?}"
            )),
            _ => {}
        }

        // Accounts are isolated: Bob's replay of Alice's key is his own
        // order; he can neither read nor look up hers.
        let key = format!("\"{}\"", uuid::Uuid::new_v4());
        let a = raw(port, &Request::post(&alice, &key, BODY).bytes(), wait).await;
        let b = raw(port, &Request::post(&bob, &key, BODY).bytes(), wait).await;
        let a_id = serde_json::from_str::<serde_json::Value>(&a.body)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned));
        if a.status != Some(201)
            || b.status != Some(201)
            || a.body == b.body
            || b.header("idempotent-replayed").is_some()
        {
            report.violations.push(format!(
                "cross-account replay: alice {:?}, bob {:?} {}",
                a.status, b.status, b.body
            ));
        }
        let bob_changes = raw(
            port,
            &Request::post(&bob, &key, r#"{"sku":"LIBRO-TS","quantity":3}"#).bytes(),
            wait,
        )
        .await;
        if bob_changes.status != Some(422) {
            report.violations.push(format!(
                "bob reusing his key with another body: {:?}",
                bob_changes.status
            ));
        }
        if let Some(id) = &a_id {
            let peek = raw(
                port,
                &Request::get(&bob, &format!("/orders/{id}")).bytes(),
                wait,
            )
            .await;
            if peek.status != Some(404) {
                report
                    .violations
                    .push(format!("bob read alice's order: {:?}", peek.status));
            }
        }
        let alice_only = format!("\"{}\"", uuid::Uuid::new_v4());
        let _ = raw(
            port,
            &Request::post(&alice, &alice_only, BODY).bytes(),
            wait,
        )
        .await;
        let lookup = raw(
            port,
            &Request::get(
                &bob,
                &format!("/operations/{}", alice_only.trim_matches('"')),
            )
            .bytes(),
            wait,
        )
        .await;
        if !lookup.body.contains("\"unknown\"") {
            report.violations.push(format!(
                "bob's lookup of alice's key: {:?} {}",
                lookup.status, lookup.body
            ));
        }
        match (&rows_before, counts()) {
            (_, Err(err)) => report
                .violations
                .push(format!("after the cross-account checks: {err}")),
            (Ok(before), Ok(after)) if after != (before.0 + 3, before.1 + 3) => {
                report.violations.push(format!(
                    "cross-account checks: rows {before:?} -> {after:?}, not 3 more of each"
                ));
            }
            _ => {}
        }
        report.fault("cross-account", 5);

        let headers = slow_headers.await.unwrap_or_default();
        let bodies = slow_bodies.await.unwrap_or_default();
        let cut = |v: &[(bool, Duration)]| v.iter().filter(|(c, _)| *c).count();
        let slowest =
            |v: &[(bool, Duration)]| v.iter().map(|(_, d)| d.as_millis()).max().unwrap_or(0);
        report.fault("slow-header-connections", headers.len() as u64);
        report.fault("slow-body-connections", bodies.len() as u64);
        report.notes.push(format!(
            "slow headers: {}/{} connections closed by the server (slowest {} ms)",
            cut(&headers),
            headers.len(),
            slowest(&headers)
        ));
        report.notes.push(format!(
            "slow bodies: {}/{} connections answered 400 request-invalid and closed \
             (body read timeout {} ms, slowest {} ms)",
            cut(&bodies),
            bodies.len(),
            body_timeout.as_millis(),
            slowest(&bodies)
        ));
        if cut(&headers) < headers.len() {
            report.violations.push(
                "slow headers: the server kept connections open past its header timeout".into(),
            );
        }
        // Within the deadline, with room for a busy machine.
        let late = body_timeout + Duration::from_secs(3);
        let in_time = bodies.iter().filter(|(c, d)| *c && *d <= late).count();
        if in_time < bodies.len() && !skip.contains(&"slow-body") {
            report.violations.push(format!(
                "slow-body: {} of {} connections that stopped sending half-way through the body \
                 were not answered 400 request-invalid and closed within {} ms",
                bodies.len() - in_time,
                bodies.len(),
                late.as_millis()
            ));
        }

        match (rss_before, rss_kib(pid)) {
            (Some(before), Some(after)) => {
                report
                    .notes
                    .push(format!("server RSS {before} KiB before, {after} KiB after"));
                if after > before + 64 * 1024 {
                    report
                        .violations
                        .push(format!("RSS grew from {before} to {after} KiB"));
                }
            }
            (_, None) => report.violations.push(format!(
                "cannot read the server's memory from /proc/{pid}/status after the sweep"
            )),
            (None, Some(_)) => {}
        }
        let fine = raw(
            port,
            &Request::post(&alice, &format!("\"{}\"", uuid::Uuid::new_v4()), BODY).bytes(),
            wait,
        )
        .await;
        let health = raw(port, &Request::get("", "/healthz").bytes(), wait).await;
        if fine.status != Some(201) || health.status != Some(200) {
            report.violations.push(format!(
                "the server stopped serving: order {:?}, healthz {:?}",
                fine.status, health.status
            ));
        }
    });
    for name in skip {
        report
            .notes
            .push(format!("check skipped (known defect): {name}"));
    }
    report.ops = 0;
    report.elapsed = started.elapsed();
    drop(servers);
    Ok(report)
}

/// "o/r" as two counts; `None` for anything else.
fn parse_counts(out: &str) -> Option<(u64, u64)> {
    let (orders, records) = out.trim().split_once('/')?;
    Some((orders.parse().ok()?, records.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::parse_counts;

    #[test]
    fn counts_parse_only_from_two_numbers() {
        assert_eq!(parse_counts("3/4\n"), Some((3, 4)));
        for bad in [
            "",
            "3",
            "3/",
            "/4",
            "x/4",
            "ERROR: relation \"orders\" does not exist",
        ] {
            assert_eq!(parse_counts(bad), None, "{bad:?}");
        }
    }
}
