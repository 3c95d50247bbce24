//! What the serve benches share (`bursar-serve-bench`, `bursar-cluster-bench`): the policy set they
//! load, the submissions they send, bounded keep-alive clients over loopback HTTP with their
//! latencies, `/metrics` reading and argument parsing.
//!
//! Boundaries: no server is started here (each bench starts its own: in-process, or as child
//! processes), and only 127.0.0.1 is contacted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bursar_client::Conn;
use bursar_model::{Event, EventKind, JobSpec, Ready};

/// The policy set both benches run: a quota, readiness and an idle reclaim.
pub const POLICIES: &str = r#"[[policy]]
id = "quota/monthly"
description = "monthly GPU-hours per project"
kind = "quota"
gpu_hours = 100000000

[[policy]]
id = "readiness/ready"
description = "GPUs only when image, data and script are ready"
kind = "readiness"

[[policy]]
id = "reclaim/idle"
description = "release idle GPUs"
kind = "reclaim"
max_runtime = "72h"
[policy.idle]
below = 0.1
window = "1h"
grace = "15m"
"#;

/// The `n`-th submission of a run tagged `tag`: job `<tag>-j<n>`, event `<tag>-e<n>`, one of
/// `projects` projects, 1 to 8 GPUs, ready.
pub fn submit_line(tag: &str, n: usize, projects: usize) -> String {
    let job = JobSpec {
        id: format!("{tag}-j{n}"),
        project: format!("p{}", n % projects.max(1)),
        user: format!("u{}", n % 97),
        queue: Some("batch".into()),
        gpus: (1 + (n % 8) as u32).into(),
        gpu_type: Some("H100".into()),
        gpu_mem_gb: Some(80.0),
        nodes: 1,
        requested_hours: 2.0,
        stage: Some("finetune".into()),
        model_params_b: Some(7.0),
        ready: Ready::all(),
        ..JobSpec::default()
    };
    Event {
        id: format!("{tag}-e{n}"),
        time: bursar_serve::wall_time(),
        kind: EventKind::JobSubmitted(Box::new(job)),
        extra: Vec::new(),
    }
    .to_json()
}

/// Latencies of one load, in microseconds and sorted, its wall time and its non-200 answers.
pub struct Run {
    /// Each request's latency, µs, sorted.
    pub micros: Vec<u64>,
    /// From the first request to the last answer.
    pub wall: Duration,
    /// Answers other than 200.
    pub errors: u64,
}

impl Run {
    /// The `p` quantile (0 to 1), in milliseconds.
    pub fn pct(&self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return 0.0;
        }
        let i = ((self.micros.len() as f64 - 1.0) * p).round() as usize;
        self.micros[i.min(self.micros.len() - 1)] as f64 / 1000.0
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.micros.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// What one client thread sends: the `n`-th request of the load as method, path and body. After a
/// 200 answer, `then` may send follow-up requests on the client's second connection (to the next
/// address); their answers count as errors when not 200, their latencies are not measured.
pub trait Requests: Send + Sync + 'static {
    /// The `n`-th request.
    fn request(&self, n: usize) -> (&'static str, String, Vec<u8>);
    /// Follow-ups of the `n`-th request after its answer `body`.
    fn then(&self, _n: usize, _body: &[u8]) -> Vec<(&'static str, String, Vec<u8>)> {
        Vec::new()
    }
}

impl<F> Requests for F
where
    F: Fn(usize) -> (&'static str, String, Vec<u8>) + Send + Sync + 'static,
{
    fn request(&self, n: usize) -> (&'static str, String, Vec<u8>) {
        self(n)
    }
}

/// `concurrency` keep-alive clients, client `c` on `addrs[c % len]` (its follow-ups on the next
/// address), send `requests` requests in all. Bounded by count.
pub fn load(addrs: &[SocketAddr], requests: usize, concurrency: usize, make: impl Requests) -> Result<Run, String> {
    if addrs.is_empty() {
        return Err("no server to load".into());
    }
    let make = Arc::new(make);
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..concurrency {
        let (make, next, errors) = (make.clone(), next.clone(), errors.clone());
        let (addr, other) = (addrs[c % addrs.len()], addrs[(c + 1) % addrs.len()]);
        handles.push(std::thread::spawn(move || -> Result<Vec<u64>, String> {
            let mut conn = Conn::connect(addr, None).map_err(|e| e.to_string())?;
            let mut second: Option<Conn> = None;
            let mut lat = Vec::with_capacity(requests / concurrency.max(1) + 1);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= requests {
                    break;
                }
                let (method, path, body) = make.request(n);
                let t = Instant::now();
                let r = conn.request(method, &path, &body).map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_micros() as u64);
                if r.status != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                for (method, path, body) in make.then(n, &r.body) {
                    let c = match second.as_mut() {
                        Some(c) => c,
                        None => second.insert(Conn::connect(other, None).map_err(|e| e.to_string())?),
                    };
                    if c.request(method, &path, &body).map_err(|e| e.to_string())?.status != 200 {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(lat)
        }));
    }
    let mut micros = Vec::with_capacity(requests);
    for h in handles {
        micros.extend(h.join().map_err(|_| "a client thread panicked".to_owned())??);
    }
    let wall = started.elapsed();
    micros.sort_unstable();
    Ok(Run { micros, wall, errors: errors.load(Ordering::Relaxed) })
}

/// `GET path` on `addr`: status and body.
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let r = Conn::connect(addr, None).and_then(|mut c| c.request("GET", path, b"")).map_err(|e| e.to_string())?;
    Ok((r.status, r.text()))
}

/// The value of the unlabelled series `name` in a Prometheus text exposition (0 when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// The exit status of bench `name` that ended with `result`; an error goes to stderr first.
pub fn exit(name: &str, result: Result<(), String>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Command-line arguments, read one flag at a time.
pub struct Args {
    args: std::iter::Skip<std::env::Args>,
    usage: &'static str,
}

impl Args {
    /// This process's arguments; `usage` is the message for a wrong one.
    pub fn new(usage: &'static str) -> Args {
        Args { args: std::env::args().skip(1), usage }
    }

    /// The next flag.
    pub fn flag(&mut self) -> Option<String> {
        self.args.next()
    }

    /// The value of `flag`.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        self.args.next().ok_or_else(|| format!("`{flag}` needs a value\n{}", self.usage))
    }

    /// The number after `flag`, clamped to `range`.
    pub fn number(&mut self, flag: &str, range: std::ops::RangeInclusive<usize>) -> Result<usize, String> {
        let v = self.value(flag)?;
        let n: usize = v.parse().map_err(|_| format!("`{flag}` needs a number, not `{v}`\n{}", self.usage))?;
        Ok(n.clamp(*range.start(), *range.end()))
    }

    /// The error for an argument no flag takes.
    pub fn unknown(&self, arg: &str) -> String {
        format!("unknown argument `{arg}`\n{}", self.usage)
    }
}
