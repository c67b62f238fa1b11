//! The run's figures from every connection's samples: exact percentiles
//! (every latency kept and sorted), the status counts, and Little's law's
//! mean for comparison with the measured one.

use crate::connection::Recorder;

/// What the run measured.
#[derive(Debug)]
pub struct Summary {
    requests: usize,
    duration_s: f64,
    latencies_us: Vec<u64>,
    mean_us: f64,
    connections: usize,
    statuses: [u64; 6],
    replayed: u64,
    err_connect: u64,
    err_read: u64,
}

const S201: usize = 0;
const S2XX: usize = 1;
const S409: usize = 2;
const S422: usize = 3;
const S503: usize = 4;
const SOTHER: usize = 5;

impl Summary {
    /// Merges the connections' samples.
    pub fn of(recorders: &[Recorder], connections: usize) -> Self {
        let mut latencies_us = Vec::new();
        let mut statuses = [0u64; 6];
        let mut replayed = 0;
        let mut last_end = 0u64;
        let (mut err_connect, mut err_read) = (0, 0);
        for r in recorders {
            err_connect += r.err_connect;
            err_read += r.err_read;
            last_end = last_end.max(r.last_end_us);
            for s in &r.samples {
                latencies_us.push(s.latency_us);
                replayed += u64::from(s.replayed);
                let slot = match s.status {
                    201 => S201,
                    409 => S409,
                    422 => S422,
                    503 => S503,
                    200..=299 => S2XX,
                    _ => SOTHER,
                };
                statuses[slot] += 1;
            }
        }
        latencies_us.sort_unstable();
        let requests = latencies_us.len();
        let mean_us = if requests == 0 {
            0.0
        } else {
            latencies_us.iter().map(|&l| l as f64).sum::<f64>() / requests as f64
        };
        Self {
            requests,
            duration_s: last_end as f64 / 1e6,
            latencies_us,
            mean_us,
            connections,
            statuses,
            replayed,
            err_connect,
            err_read,
        }
    }

    /// The latency at quantile `q` (nearest rank), in ms.
    fn percentile_ms(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let rank = ((q * self.latencies_us.len() as f64).ceil() as usize)
            .clamp(1, self.latencies_us.len());
        self.latencies_us[rank - 1] as f64 / 1000.0
    }

    /// One machine-readable line, the fields of `bench/wrk/common.lua`'s
    /// plus `mean_ms`, `little_ms` (connections / rate) and `p999_ms`.
    pub fn result_line(&self) -> String {
        let rps = if self.duration_s > 0.0 {
            self.requests as f64 / self.duration_s
        } else {
            0.0
        };
        let little_ms = if rps > 0.0 {
            1000.0 * self.connections as f64 / rps
        } else {
            0.0
        };
        let s = &self.statuses;
        format!(
            "RESULT requests={} duration_s={:.2} rps={:.1} p50_ms={:.2} p90_ms={:.2} p99_ms={:.2} \
             p999_ms={:.2} max_ms={:.2} mean_ms={:.3} little_ms={:.3} s201={} s2xx={} s409={} s422={} \
             s503={} sother={} replayed={} err_connect={} err_read={} err_write=0 err_timeout=0",
            self.requests,
            self.duration_s,
            rps,
            self.percentile_ms(0.50),
            self.percentile_ms(0.90),
            self.percentile_ms(0.99),
            self.percentile_ms(0.999),
            self.percentile_ms(1.0),
            self.mean_us / 1000.0,
            little_ms,
            s[S201],
            s[S2XX],
            s[S409],
            s[S422],
            s[S503],
            s[SOTHER],
            self.replayed,
            self.err_connect,
            self.err_read,
        )
    }
}
