//! `bursar-cluster-bench`: admissions/s and admission latency of `bursar serve --cluster` with 1, 2
//! and 3 instances beside single-node `bursar serve`, on the same load, in one run on this machine,
//! with each configuration's ratio to single-node.
//!
//! It starts everything in-process or as a child it stops by PID: single-node serve (audit log
//! `synchronous=NORMAL`, as the cluster's projections commit), a real 3-node `nats-server` JetStream
//! cluster on loopback (`bursar-testkit`, one NATS account per configuration so none sees another's
//! streams), then one, two and three cluster instances (16 partitions, replicas 3). For each it
//! measures, over loopback HTTP:
//! 1. `POST /v1/admit` from `--concurrency` keep-alive clients spread over the instances: throughput
//!    and p50/p99 latency; with `--lifecycle` each allowed job's `job.started` and `job.finished`
//!    go to the next instance's `POST /v1/events` in between (the issue's "with job starts and
//!    finishes in the stream");
//! 2. `POST /v1/events` of `job.sample` batches (`--batch` lines each) for the admitted jobs, timed
//!    until every event is *applied* (single node: the answer comes after the commit; cluster: until
//!    the owners' `bursar_cluster_events_applied_total` has grown by as many);
//! 3. for the cluster rows, where an admission's time went, from the instances' `/metrics`: the
//!    front end's wait for the owner, the job-index write beside it, the owners' journal commits
//!    (entries per commit, milliseconds per commit) and their apply time.
//!
//! Everything shares the machine's cores (NATS's three nodes, the instances and the load
//! generator). Every loop is bounded by count; only 127.0.0.1 is contacted.
//!
//! Usage: `bursar-cluster-bench [--admissions N] [--events N] [--concurrency C] [--batch B]
//! [--lifecycle] [--instances 1,2,3]`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bursar_client::Conn;
use bursar_model::{Event, EventKind, JobSpec, Ready};

const POLICIES: &str = r#"[[policy]]
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

struct Opts {
    admissions: usize,
    events: usize,
    concurrency: usize,
    batch: usize,
    lifecycle: bool,
    instances: Vec<usize>,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        admissions: 3000,
        events: 20_000,
        concurrency: 8,
        batch: 100,
        lifecycle: false,
        instances: vec![1, 2, 3],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            args.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("`{name}` needs a number"))
        };
        match a.as_str() {
            "--admissions" => o.admissions = num("--admissions")?.clamp(10, 1_000_000),
            "--events" => o.events = num("--events")?.clamp(100, 10_000_000),
            "--concurrency" => o.concurrency = num("--concurrency")?.clamp(1, 256),
            "--batch" => o.batch = num("--batch")?.clamp(1, 10_000),
            "--lifecycle" => o.lifecycle = true,
            "--instances" => {
                let v = args.next().ok_or("`--instances` needs a list such as 1,2,3")?;
                o.instances = v
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().ok().filter(|n| (1..=5).contains(n)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("`--instances` takes counts from 1 to 5, comma-separated")?;
            }
            _ => {
                return Err(
                    "usage: bursar-cluster-bench [--admissions N] [--events N] [--concurrency C] [--batch B] [--lifecycle] [--instances 1,2,3]".into()
                );
            }
        }
    }
    Ok(o)
}

/// A server on its own thread and runtime.
struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Running {
    fn start(
        dir: &Path,
        audit: &Path,
        durable: bool,
        cluster: Option<bursar_cluster::ClusterConfig>,
    ) -> Result<Running, String> {
        let mut config = bursar_serve::Config::new(dir, audit);
        config.durable = durable;
        config.watch = false;
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                let _ = addr_tx.send(addr);
                let stop = async move {
                    let _ = stop_rx.await;
                };
                match cluster {
                    Some(c) => bursar_serve::cluster::serve_cluster(config, c, listener, stop, |_| Ok(())).await,
                    None => bursar_serve::serve(config, listener, stop).await,
                }
                .map_err(|e| e.to_string())
            })
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the server did not start".to_owned())?;
        let r = Running { addr, stop: Some(stop_tx), thread: Some(thread) };
        for _ in 0..6000 {
            if get(addr, "/healthz").is_ok_and(|(s, _)| s == 200) {
                return Ok(r);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("the server did not answer".into())
    }

    fn stop(mut self) -> Result<(), String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the server thread panicked".into()),
            None => Ok(()),
        }
    }
}

fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let r = Conn::connect(addr, None).and_then(|mut c| c.request("GET", path, b"")).map_err(|e| e.to_string())?;
    Ok((r.status, r.text()))
}

fn submit_line(tag: &str, n: usize) -> String {
    let job = JobSpec {
        id: format!("{tag}-j{n}"),
        project: format!("p{}", n % 40),
        user: format!("u{}", n % 97),
        queue: Some("batch".into()),
        gpus: 1 + (n % 8) as u32,
        gpu_type: Some("H100".into()),
        nodes: 1,
        requested_hours: 2.0,
        stage: Some("finetune".into()),
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

fn samples(tag: &str, from: usize, count: usize, jobs: usize) -> String {
    let time = bursar_serve::wall_time().to_string();
    let mut body = String::new();
    for n in from..from + count {
        body.push_str(&format!(
            r#"{{"id":"{tag}-s{n}","time":"{time}","type":"job.sample","job_id":"{tag}-j{}","gpu_util":0.8,"mem_util":0.5}}"#,
            n % jobs.max(1)
        ));
        body.push('\n');
    }
    body
}

/// Latencies in microseconds, sorted, and the wall time.
struct Run {
    micros: Vec<u64>,
    wall: Duration,
    errors: u64,
}

impl Run {
    fn pct(&self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return 0.0;
        }
        let i = ((self.micros.len() as f64 - 1.0) * p).round() as usize;
        self.micros[i.min(self.micros.len() - 1)] as f64 / 1000.0
    }
}

/// `concurrency` clients, spread over `addrs`, send `requests` requests in all.
fn load(
    addrs: &[SocketAddr],
    requests: usize,
    concurrency: usize,
    make: impl Fn(usize) -> (&'static str, Vec<u8>) + Send + Sync + 'static,
) -> Result<Run, String> {
    let make = Arc::new(make);
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..concurrency {
        let (make, next, errors) = (make.clone(), next.clone(), errors.clone());
        let addr = addrs[c % addrs.len()];
        handles.push(std::thread::spawn(move || -> Result<Vec<u64>, String> {
            let mut conn = Conn::connect(addr, None).map_err(|e| e.to_string())?;
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= requests {
                    break;
                }
                let (path, body) = make(n);
                let t = Instant::now();
                let r = conn.request("POST", path, &body).map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_micros() as u64);
                if r.status != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(lat)
        }));
    }
    let mut micros = Vec::with_capacity(requests);
    for h in handles {
        micros.extend(h.join().map_err(|_| "a client thread panicked".to_owned())??);
    }
    micros.sort_unstable();
    Ok(Run { micros, wall: started.elapsed(), errors: errors.load(Ordering::Relaxed) })
}

/// Admissions from `concurrency` clients spread over `addrs`; with `lifecycle`, each allowed job's
/// start and finish go to the next instance in between. Latencies are the admissions'.
fn admissions(
    addrs: &[SocketAddr],
    tag: &str,
    requests: usize,
    concurrency: usize,
    lifecycle: bool,
) -> Result<Run, String> {
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..concurrency {
        let (next, errors, tag) = (next.clone(), errors.clone(), tag.to_owned());
        let (addr, other) = (addrs[c % addrs.len()], addrs[(c + 1) % addrs.len()]);
        handles.push(std::thread::spawn(move || -> Result<Vec<u64>, String> {
            let mut conn = Conn::connect(addr, None).map_err(|e| e.to_string())?;
            let mut events = Conn::connect(other, None).map_err(|e| e.to_string())?;
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                if n >= requests {
                    break;
                }
                let body = submit_line(&tag, n);
                let t = Instant::now();
                let r = conn.request("POST", "/v1/admit", body.as_bytes()).map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_micros() as u64);
                if r.status != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if lifecycle && r.text().contains(r#""decision":"allow""#) {
                    let time = bursar_serve::wall_time().to_string();
                    let body = format!(
                        "{{\"id\":\"{tag}-b{n}\",\"time\":\"{time}\",\"type\":\"job.started\",\"job_id\":\"{tag}-j{n}\"}}\n{{\"id\":\"{tag}-f{n}\",\"time\":\"{time}\",\"type\":\"job.finished\",\"job_id\":\"{tag}-j{n}\",\"status\":\"succeeded\"}}\n"
                    );
                    let r = events.request("POST", "/v1/events", body.as_bytes()).map_err(|e| e.to_string())?;
                    if r.status != 200 {
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
    micros.sort_unstable();
    Ok(Run { micros, wall: started.elapsed(), errors: errors.load(Ordering::Relaxed) })
}

/// The sum over `addrs` of a metric's value.
fn metric(addrs: &[SocketAddr], name: &str) -> f64 {
    let prefix = format!("{name} ");
    addrs
        .iter()
        .filter_map(|a| get(*a, "/metrics").ok())
        .filter_map(|(_, t)| t.lines().find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse::<f64>().ok())))
        .sum()
}

fn applied(addrs: &[SocketAddr]) -> u64 {
    metric(addrs, "bursar_cluster_events_applied_total") as u64
}

fn live(addrs: &[SocketAddr]) -> usize {
    addrs
        .iter()
        .filter_map(|a| get(*a, "/v1/cluster").ok())
        .filter_map(|(_, t)| serde_json::from_str::<bursar_model::api::ClusterView>(&t).ok())
        .map(|v| v.owned.iter().filter(|o| o.state == "live").count())
        .sum()
}

/// Where the cluster's admissions spent their time, from the instances' counters.
#[derive(Default)]
struct Breakdown {
    ask_ms: f64,
    index_ms: f64,
    flush_ms: f64,
    entries_per_flush: f64,
    apply_ms: f64,
}

struct Row {
    name: String,
    admit: Run,
    events_per_s: f64,
    breakdown: Option<Breakdown>,
}

const COUNTERS: [&str; 6] = [
    "bursar_cluster_admissions_decided_total",
    "bursar_cluster_admit_ask_seconds_total",
    "bursar_cluster_admit_index_seconds_total",
    "bursar_cluster_journal_flushes_total",
    "bursar_cluster_journal_entries_total",
    "bursar_cluster_journal_flush_seconds_total",
];

fn counters(addrs: &[SocketAddr]) -> Vec<f64> {
    COUNTERS.iter().map(|c| metric(addrs, c)).chain([metric(addrs, "bursar_cluster_apply_seconds_total")]).collect()
}

fn measure(name: &str, tag: &str, addrs: &[SocketAddr], o: &Opts, cluster: bool) -> Result<Row, String> {
    let before = if cluster { counters(addrs) } else { Vec::new() };
    let admit = admissions(addrs, tag, o.admissions, o.concurrency, o.lifecycle)?;
    let breakdown = cluster.then(|| {
        let after = counters(addrs);
        let d: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let (decided, flushes) = (d[0].max(1.0), d[3].max(1.0));
        Breakdown {
            ask_ms: d[1] * 1e3 / decided,
            index_ms: d[2] * 1e3 / decided,
            flush_ms: d[5] * 1e3 / flushes,
            entries_per_flush: d[4] / flushes,
            apply_ms: d[6] * 1e3 / flushes,
        }
    });
    let mut events_per_s = 0.0;
    if o.events > 0 {
        let before = if cluster { applied(addrs) } else { 0 };
        let started = Instant::now();
        let (t, jobs, batch) = (tag.to_owned(), o.admissions, o.batch);
        let posts = o.events.div_ceil(batch);
        let run = load(addrs, posts, o.concurrency, move |n| {
            ("/v1/events", samples(&t, n * batch, batch, jobs).into_bytes())
        })?;
        let total = (posts * batch) as u64;
        if cluster {
            let deadline = Instant::now() + Duration::from_secs(300);
            while applied(addrs) < before + total {
                if Instant::now() > deadline {
                    return Err(format!("{name}: only {} of {total} events applied", applied(addrs) - before));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if run.errors > 0 {
            return Err(format!("{name}: {} event posts failed", run.errors));
        }
        events_per_s = total as f64 / started.elapsed().as_secs_f64();
    }
    if admit.errors > 0 {
        return Err(format!("{name}: {} admissions (or their job events) failed", admit.errors));
    }
    Ok(Row { name: name.to_owned(), admit, events_per_s, breakdown })
}

fn view(addr: SocketAddr) -> Option<bursar_model::api::ClusterView> {
    get(addr, "/v1/cluster").ok().and_then(|(_, t)| serde_json::from_str(&t).ok())
}

fn run() -> Result<(), String> {
    let o = parse_opts()?;
    let dir = bursar_testkit::TempDir::new("cluster-bench").map_err(|e| e.to_string())?;
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).map_err(|e| e.to_string())?;
    std::fs::write(policies.join("set.toml"), POLICIES).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    {
        let audit = dir.path().join("single.db");
        let s = Running::start(&policies, &audit, false, None)?;
        rows.push(measure("single-node serve", "sn", &[s.addr], &o, false)?);
        s.stop()?;
    }
    if bursar_testkit::NatsCluster::binary().is_none() {
        return Err("no nats-server binary (scripts/setup.sh installs it)".into());
    }
    let accounts: Vec<String> = o.instances.iter().map(|n| format!("c{n}")).collect();
    let names: Vec<&str> = accounts.iter().map(String::as_str).collect();
    let nats = bursar_testkit::NatsCluster::start_with_accounts(3, &names).map_err(|e| e.to_string())?;
    for (&n, account) in o.instances.iter().zip(&accounts) {
        let mut servers = Vec::new();
        for i in 0..n {
            let name = format!("{account}-{i}");
            let db = dir.path().join(format!("{name}.db"));
            let mut c = bursar_cluster::ClusterConfig::new(nats.url_as(account), name.clone(), db.clone());
            c.partitions = 16;
            servers.push(Running::start(&policies, &db, false, Some(c))?);
        }
        let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        // All 16 partitions live and shared out (no instance under its share).
        while live(&addrs) < 16 || addrs.iter().any(|a| view(*a).is_none_or(|v| v.owned.len() < 16 / n)) {
            if Instant::now() > deadline {
                return Err(format!("{n} instance(s): the partitions were not shared out"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let label = if n == 1 { "cluster, 1 instance".to_owned() } else { format!("cluster, {n} instances") };
        rows.push(measure(&label, account, &addrs, &o, true)?);
        for s in servers {
            s.stop()?;
        }
    }
    drop(nats);
    let base = &rows[0];
    let base_rate = base.admit.micros.len() as f64 / base.admit.wall.as_secs_f64();
    let (base_p50, base_p99, base_events) = (base.admit.pct(0.5), base.admit.pct(0.99), base.events_per_s);
    println!(
        "{} admissions{} per configuration, {} clients; {} `job.sample` events in {}-line batches\n",
        o.admissions,
        if o.lifecycle { " (each allowed job started and finished through another instance)" } else { "" },
        o.concurrency,
        o.events,
        o.batch
    );
    println!(
        "| configuration | admissions/s | × single | admit p50 ms | p99 ms | p99 × | events/s (applied) | × single |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let rate = r.admit.micros.len() as f64 / r.admit.wall.as_secs_f64();
        let (p50, p99) = (r.admit.pct(0.5), r.admit.pct(0.99));
        let ev = if o.events > 0 {
            format!("{:.0} | {:.2}", r.events_per_s, r.events_per_s / base_events)
        } else {
            "– | –".into()
        };
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {ev} |",
            r.name,
            rate,
            rate / base_rate,
            p50,
            p99,
            p99 / base_p99.max(1e-9),
        );
        let _ = base_p50;
    }
    println!("\nwhere a cluster admission's time went (averages over the admission phase):\n");
    println!(
        "| configuration | front waits for the owner ms | job index write ms (beside it) | journal commit ms | entries per commit | apply ms per batch |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        if let Some(b) = &r.breakdown {
            println!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.3} |",
                r.name, b.ask_ms, b.index_ms, b.flush_ms, b.entries_per_flush, b.apply_ms
            );
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bursar-cluster-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
