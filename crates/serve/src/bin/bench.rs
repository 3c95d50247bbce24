//! `bursar-serve-bench`: a bounded load generator for `bursar serve` over loopback HTTP.
//!
//! It starts the real server in-process on `127.0.0.1:0` (policies and a fresh audit database in a
//! scratch directory), then measures, in one run:
//! 1. the HTTP floor: `GET /healthz` from the same concurrent clients (the baseline);
//! 2. `POST /v1/admit` with the audit log committed `synchronous=FULL` (the default) and, on a second
//!    server, `synchronous=NORMAL` (`--fast-commit`): latency percentiles and throughput;
//!    Then one client alone, and one client beside three that read `GET /v1/pool` back to back
//!    (the ratio of the two p99s: the pool view must not stall admissions);
//! 3. reload latency: from the moment a policy file is renamed into place to the moment
//!    `/v1/policies` shows the new digest (watcher + debounce + compile + swap), and `POST /v1/reload`;
//! 4. reloads under load: admissions while the policy file is rewritten every 50 ms, then a check that
//!    every admission has exactly one decision in the audit log.
//!
//! Usage: `bursar-serve-bench [--requests N] [--concurrency C] [--reloads K]`. Every loop is bounded
//! by count; only 127.0.0.1 is ever contacted.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bursar_client::Conn;
use common::{POLICIES, Run, get, load, metric, submit_line};

struct Opts {
    requests: usize,
    concurrency: usize,
    reloads: usize,
}

const USAGE: &str = "usage: bursar-serve-bench [--requests N] [--concurrency C] [--reloads K]";

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts { requests: 20_000, concurrency: 32, reloads: 20 };
    let mut args = common::Args::new(USAGE);
    while let Some(a) = args.flag() {
        match a.as_str() {
            "--requests" => o.requests = args.number("--requests", 1..=2_000_000)?,
            "--concurrency" => o.concurrency = args.number("--concurrency", 1..=512)?,
            "--reloads" => o.reloads = args.number("--reloads", 1..=1000)?,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(args.unknown(other)),
        }
    }
    Ok(o)
}

/// A running in-process server.
struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Running {
    fn start(dir: &Path, audit: &Path, durable: bool) -> Result<Running, String> {
        let mut config = bursar_serve::Config::new(dir, audit);
        config.durable = durable;
        config.debounce = Duration::from_millis(20);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                let _ = addr_tx.send(addr);
                bursar_serve::serve(config, listener, async move {
                    let _ = stop_rx.await;
                })
                .await
                .map_err(|e| e.to_string())
            })
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the server did not start".to_owned())?;
        let r = Running { addr, stop: Some(stop_tx), thread: Some(thread) };
        // Wait until the API answers (policies compiled, state recovered).
        for _ in 0..6000 {
            if Conn::connect(addr, None)
                .and_then(|mut c| c.request("GET", "/v1/policies", b""))
                .is_ok_and(|r| r.status == 200)
            {
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

/// One line of the results table.
fn row(run: &Run, name: &str) -> String {
    format!(
        "| {name} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
        run.micros.len(),
        run.rate(),
        run.pct(0.50),
        run.pct(0.90),
        run.pct(0.99),
        run.pct(0.999),
        run.pct(1.0),
        run.errors
    )
}

/// A submission of this bench (20 projects).
fn admit(tag: &'static str) -> impl Fn(usize) -> (&'static str, String, Vec<u8>) + Send + Sync + 'static {
    move |n| ("POST", "/v1/admit".to_owned(), submit_line(tag, n, 20).into_bytes())
}

/// Sums and counts of the server's histograms, from `/metrics`.
#[derive(Debug, Clone, Copy)]
struct Scrape {
    at: Instant,
    eval_sum: f64,
    eval_n: f64,
    commit_sum: f64,
    commit_n: f64,
    transactions: f64,
    records: f64,
    busy: f64,
}

fn scrape(addr: SocketAddr) -> Result<Scrape, String> {
    let (_, text) = get(addr, "/metrics")?;
    let get = |name: &str| metric(&text, name);
    Ok(Scrape {
        at: Instant::now(),
        transactions: get("bursar_audit_transactions_total"),
        records: get("bursar_audit_transaction_records_total"),
        busy: get("bursar_audit_writer_busy_seconds_total"),
        eval_sum: get("bursar_eval_seconds_sum"),
        eval_n: get("bursar_eval_seconds_count"),
        commit_sum: get("bursar_audit_commit_seconds_sum"),
        commit_n: get("bursar_audit_commit_seconds_count"),
    })
}

/// Engine and audit cost per admission over a run: mean engine µs per event; per engine batch, the
/// mean ms from hand-over to durable and the admissions it held; per writer transaction (one fsync),
/// the mean records it held and its mean ms; and the writer's busy fraction over the run.
fn breakdown(name: &str, before: Scrape, after: Scrape) -> String {
    let ev = after.eval_n - before.eval_n;
    let cn = after.commit_n - before.commit_n;
    let tx = after.transactions - before.transactions;
    let busy = after.busy - before.busy;
    let wall = after.at.duration_since(before.at).as_secs_f64();
    let per = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    format!(
        "| {name} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} % |",
        per(after.eval_sum - before.eval_sum, ev) * 1e6,
        per(after.commit_sum - before.commit_sum, cn) * 1e3,
        per(ev, cn),
        per(after.records - before.records, tx),
        per(busy, tx) * 1e3,
        per(busy, wall) * 100.0,
    )
}

fn digest(addr: SocketAddr) -> Result<String, String> {
    let (_, text) = get(addr, "/v1/policies")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(v["digest"].as_str().unwrap_or_default().to_owned())
}

fn write_by_rename(dir: &Path, text: &str) -> Result<(), String> {
    let tmp = dir.join(".policies.toml.tmp");
    std::fs::write(&tmp, text).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, dir.join("policies.toml")).map_err(|e| e.to_string())
}

fn variant(i: usize) -> String {
    POLICIES.replace("gpu_hours = 100000000", &format!("gpu_hours = {}", 100_000_000 + i))
}

fn run() -> Result<(), String> {
    let o = parse_opts()?;
    let scratch: PathBuf = std::env::temp_dir().join(format!("bursar-serve-bench-{}", std::process::id()));
    let policies = scratch.join("policies");
    std::fs::create_dir_all(&policies).map_err(|e| e.to_string())?;
    write_by_rename(&policies, POLICIES)?;

    println!(
        "# bursar-serve-bench: {} requests, {} concurrent clients, {} reloads",
        o.requests, o.concurrency, o.reloads
    );
    println!(
        "machine: {} cores (std::thread::available_parallelism)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| run | requests | per second | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | non-200 |");
    println!("|---|---|---|---|---|---|---|---|---|");

    // 1 and 2: FULL durability.
    let server = Running::start(&policies, &scratch.join("full.db"), true)?;
    let floor = load(&[server.addr], o.requests, o.concurrency, |_| ("GET", "/healthz".to_owned(), Vec::new()))?;
    println!("{}", row(&floor, "GET /healthz (HTTP floor)"));
    let m0 = scrape(server.addr)?;
    let full = load(&[server.addr], o.requests, o.concurrency, admit("full"))?;
    let m1 = scrape(server.addr)?;
    println!("{}", row(&full, "POST /v1/admit, audit synchronous=FULL"));
    let single = load(&[server.addr], o.requests.min(5000), 1, admit("single"))?;
    let m2 = scrape(server.addr)?;
    println!("{}", row(&single, "POST /v1/admit, FULL, 1 client"));

    // 2c: the same one client while three others read `GET /v1/pool` back to back, with every job
    // admitted so far in the view (issue 34: the view was built on the engine thread, and three
    // readers took an admission from 22 ms to 2.6 s; it is now built from a copy, off that thread).
    let stop_pool = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, addr) = (stop_pool.clone(), server.addr);
            std::thread::spawn(move || -> (u64, u64) {
                let Ok(mut c) = Conn::connect(addr, None) else { return (0, 0) };
                let (mut reads, mut bytes) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    match c.request("GET", "/v1/pool", b"") {
                        Ok(r) if r.status == 200 => {
                            reads += 1;
                            bytes += r.body.len() as u64;
                        }
                        _ => break,
                    }
                }
                (reads, bytes)
            })
        })
        .collect();
    let pool_started = Instant::now();
    let beside_pool = load(&[server.addr], o.requests.min(5000), 1, admit("pooled"))?;
    stop_pool.store(true, Ordering::Relaxed);
    let pool_secs = pool_started.elapsed().as_secs_f64();
    let (pool_reads, pool_bytes) =
        readers.into_iter().map(|h| h.join().unwrap_or((0, 0))).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    println!("{}", row(&beside_pool, "POST /v1/admit, FULL, 1 client, 3 clients reading GET /v1/pool"));

    // 3: reload latency, watcher path and explicit path.
    let mut watch_ms = Vec::new();
    for i in 0..o.reloads {
        let before = digest(server.addr)?;
        let t = Instant::now();
        write_by_rename(&policies, &variant(i + 1))?;
        let mut ok = false;
        for _ in 0..20_000 {
            if digest(server.addr)? != before {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        if !ok {
            return Err(format!("reload {i} never took effect"));
        }
        watch_ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut post_ms = Vec::new();
    for i in 0..o.reloads {
        std::fs::write(policies.join("policies.toml"), variant(10_000 + i)).map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(60)); // let the watcher's own reload pass first
        let t = Instant::now();
        let r = Conn::connect(server.addr, None)
            .and_then(|mut c| c.request("POST", "/v1/reload", b""))
            .map_err(|e| e.to_string())?;
        post_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            return Err(format!("POST /v1/reload failed: {}", r.text()));
        }
    }
    server.stop()?;

    // 2b: NORMAL durability, same load.
    let server = Running::start(&policies, &scratch.join("normal.db"), false)?;
    let m3 = scrape(server.addr)?;
    let normal = load(&[server.addr], o.requests, o.concurrency, admit("normal"))?;
    let m4 = scrape(server.addr)?;
    println!("{}", row(&normal, "POST /v1/admit, audit synchronous=NORMAL"));

    // 4: admissions while the policy file is rewritten every 50 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let rewriter = {
        let stop = stop.clone();
        let policies = policies.clone();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && i < 10_000 {
                let _ = write_by_rename(&policies, &variant(20_000 + i));
                i += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            i
        })
    };
    let under = load(&[server.addr], o.requests, o.concurrency, admit("reload"))?;
    stop.store(true, Ordering::Relaxed);
    let rewrites = rewriter.join().unwrap_or(0);
    println!("{}", row(&under, "POST /v1/admit, NORMAL, policy rewritten every 50 ms"));
    server.stop()?;

    // Check: one admission decision per admitted event across all those reloads.
    let audit = bursar_audit::AuditLog::open_read(scratch.join("normal.db")).map_err(|e| e.to_string())?;
    let mut seen = std::collections::HashMap::<String, u32>::new();
    let mut after = 0;
    loop {
        let page = audit.decisions_since(after, 10_000).map_err(|e| e.to_string())?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for d in page.iter().filter(|d| d.admission && d.event_id.starts_with("reload-")) {
            *seen.entry(d.event_id.clone()).or_default() += 1;
        }
    }
    let twice = seen.values().filter(|n| **n > 1).count();
    let loads = audit.policy_loads().map_err(|e| e.to_string())?.len();
    println!();
    println!(
        "reloads under load: {rewrites} rewrites, {loads} policy loads recorded; {} of {} admissions logged, {} decided twice",
        seen.len(),
        o.requests,
        twice
    );

    println!();
    println!(
        "| where the time goes (from /metrics) | engine µs per admission | batch hand-over to durable, ms | admissions per batch | records per writer transaction | ms per transaction | writer busy |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!("{}", breakdown("FULL, concurrent", m0, m1));
    println!("{}", breakdown("FULL, 1 client", m1, m2));
    println!("{}", breakdown("NORMAL, concurrent", m3, m4));

    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
        (p(0.5), p(0.9), v[v.len() - 1])
    };
    let (w50, w90, wmax) = stats(&mut watch_ms);
    let (p50, p90, pmax) = stats(&mut post_ms);
    println!();
    println!("| reload | trials | p50 ms | p90 ms | max ms |");
    println!("|---|---|---|---|---|");
    println!(
        "| file renamed -> new digest in /v1/policies (watch, 20 ms debounce) | {} | {w50:.1} | {w90:.1} | {wmax:.1} |",
        watch_ms.len()
    );
    println!(
        "| POST /v1/reload (compile + swap + audit record) | {} | {p50:.1} | {p90:.1} | {pmax:.1} |",
        post_ms.len()
    );
    println!();
    println!(
        "ratios: admit FULL p99 / healthz p99 = {:.1}x; admit FULL rate / healthz rate = {:.2}; NORMAL rate / FULL rate = {:.2}",
        full.pct(0.99) / floor.pct(0.99).max(1e-9),
        full.rate() / floor.rate(),
        normal.rate() / full.rate()
    );
    println!(
        "pool readers: {pool_reads} GET /v1/pool in {pool_secs:.1} s ({:.0}/s, {:.0} KiB each); admit p99 beside them / alone = {:.2}x, p50 {:.2}x",
        pool_reads as f64 / pool_secs.max(1e-9),
        pool_bytes as f64 / 1024.0 / (pool_reads.max(1) as f64),
        beside_pool.pct(0.99) / single.pct(0.99).max(1e-9),
        beside_pool.pct(0.50) / single.pct(0.50).max(1e-9),
    );
    if pool_reads == 0 {
        return Err("no GET /v1/pool was answered beside the admissions".into());
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if twice > 0 || seen.len() != o.requests {
        return Err("admissions were lost or decided twice across reloads".into());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    common::exit("bursar-serve-bench", run())
}
