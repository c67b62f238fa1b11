//! One connection's closed loop: send, wait for the whole answer, record,
//! send again; on a broken connection, count it and connect again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// What every request carries.
#[derive(Debug)]
pub struct Plan {
    method: hyper::Method,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    key: KeyPlan,
}

#[derive(Debug)]
enum KeyPlan {
    Fresh,
    Fixed(HeaderValue),
    None,
}

impl Plan {
    /// Parses the command line's request parts.
    pub fn new(
        method: &str,
        path: &str,
        headers: &[String],
        body: &str,
        key: Option<&str>,
        no_key: bool,
    ) -> Result<Self, String> {
        let method = method
            .parse()
            .map_err(|_| format!("bad method {method:?}"))?;
        let headers = headers
            .iter()
            .map(|h| {
                let (name, value) = h
                    .split_once(':')
                    .ok_or_else(|| format!("header {h:?} is not `Name: value`"))?;
                Ok((
                    HeaderName::try_from(name.trim()).map_err(|e| format!("{h:?}: {e}"))?,
                    HeaderValue::try_from(value.trim()).map_err(|e| format!("{h:?}: {e}"))?,
                ))
            })
            .collect::<Result<_, String>>()?;
        let key = match (key, no_key) {
            (_, true) => KeyPlan::None,
            (Some(k), false) => KeyPlan::Fixed(
                HeaderValue::try_from(format!("\"{k}\"")).map_err(|e| format!("key: {e}"))?,
            ),
            (None, false) => KeyPlan::Fresh,
        };
        Ok(Self {
            method,
            path: path.to_owned(),
            headers,
            body: Bytes::copy_from_slice(body.as_bytes()),
            key,
        })
    }

    fn request(&self, port: u16) -> hyper::Request<Full<Bytes>> {
        let mut builder = hyper::Request::builder()
            .method(self.method.clone())
            .uri(self.path.as_str())
            .header(hyper::header::HOST, format!("127.0.0.1:{port}"));
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        match &self.key {
            KeyPlan::Fresh => {
                builder =
                    builder.header("idempotency-key", format!("\"{}\"", uuid::Uuid::new_v4()));
            }
            KeyPlan::Fixed(value) => builder = builder.header("idempotency-key", value),
            KeyPlan::None => {}
        }
        builder
            .body(Full::new(self.body.clone()))
            .expect("a request of parsed parts")
    }
}

/// One measured request.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// When it was sent, µs after the window opened.
    pub start_us: u64,
    /// From its send to the end of its answer, µs.
    pub latency_us: u64,
    /// The answer's status.
    pub status: u16,
    /// Whether it carried `Idempotent-Replayed: true`.
    pub replayed: bool,
}

/// What one connection saw.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Which connection.
    pub connection: usize,
    /// Requests sent inside the window.
    pub samples: Vec<Sample>,
    /// Connects that failed.
    pub err_connect: u64,
    /// Requests whose answer never came whole (connection broken).
    pub err_read: u64,
    /// When the last recorded answer ended, µs after the window opened.
    pub last_end_us: u64,
}

/// Runs `connections` (index, port) on one single-threaded runtime until
/// `closes`; requests sent before `opens` are not recorded.
pub fn run_thread(
    plan: &Arc<Plan>,
    connections: &[(usize, u16)],
    opens: Instant,
    closes: Instant,
) -> Vec<Recorder> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("idemkey-loadgen: runtime: {err}");
            return Vec::new();
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let tasks: Vec<_> = connections
            .iter()
            .map(|&(index, port)| {
                tokio::task::spawn_local(one(Arc::clone(plan), index, port, opens, closes))
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            if let Ok(rec) = task.await {
                out.push(rec);
            }
        }
        out
    })
}

async fn one(
    plan: Arc<Plan>,
    index: usize,
    port: u16,
    opens: Instant,
    closes: Instant,
) -> Recorder {
    let mut rec = Recorder {
        connection: index,
        ..Recorder::default()
    };
    'connect: while Instant::now() < closes {
        let stream = match TcpStream::connect(("127.0.0.1", port)).await {
            Ok(s) => s,
            Err(_) => {
                rec.err_connect += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut sender, conn)) = http1::handshake(TokioIo::new(stream)).await else {
            rec.err_connect += 1;
            continue;
        };
        tokio::task::spawn_local(conn);
        loop {
            if sender.ready().await.is_err() {
                continue 'connect;
            }
            let sent = Instant::now();
            if sent >= closes {
                break 'connect;
            }
            let answer = match sender.send_request(plan.request(port)).await {
                Ok(answer) => answer,
                Err(_) => {
                    rec.err_read += 1;
                    continue 'connect;
                }
            };
            let status = answer.status().as_u16();
            let replayed = answer
                .headers()
                .get("idempotent-replayed")
                .is_some_and(|v| v.as_bytes() == b"true");
            if answer.into_body().collect().await.is_err() {
                rec.err_read += 1;
                continue 'connect;
            }
            let ended = Instant::now();
            if sent >= opens {
                let start_us = micros(sent - opens);
                let end_us = micros(ended - opens);
                rec.samples.push(Sample {
                    start_us,
                    latency_us: end_us - start_us,
                    status,
                    replayed,
                });
                rec.last_end_us = rec.last_end_us.max(end_us);
            }
        }
    }
    rec
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
