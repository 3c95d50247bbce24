//! `bursar-cluster-bench`: what an admission costs in `bursar serve --cluster` with 1, 2 (or more)
//! instances beside single-node `bursar serve`, on the same load, in one run on this machine, each
//! configuration as a ratio to single-node.
//!
//! Every server is a real `bursar serve` process (the `bursar` binary beside this one, or
//! `--bursar PATH`), started here and stopped by PID: single-node serve (audit log
//! `synchronous=NORMAL`, as the cluster's projections commit), then for each instance count a fresh
//! 3-node `nats-server` JetStream cluster on loopback (`bursar-testkit`) and that many cluster
//! instances (16 partitions, replicas 3). For each configuration it measures, over loopback HTTP:
//! 1. `POST /v1/admit` from `--concurrency` keep-alive clients spread over the instances (after a
//!    warm-up that is not counted): throughput and p50/p99 latency; with `--lifecycle` each allowed
//!    job's `job.started` and `job.finished` go to the next instance's `POST /v1/events` in between;
//! 2. over that admission phase: the CPU time of every server process (`utime + stime` of
//!    `/proc/<pid>/stat`: the instances, or single-node serve, and the three NATS servers), as CPU
//!    ms per 1,000 admissions; what the instances published to NATS (bytes and messages per
//!    admission, from the NATS servers' `/connz`); the owners' journal entries per commit and the
//!    front end's wait for the owner (from the instances' `/metrics`);
//! 3. `POST /v1/events` of `job.sample` batches (`--batch` lines each) for the admitted jobs, timed
//!    until every event is *applied* (single node: the answer comes after the commit; cluster: until
//!    the owners' `bursar_cluster_events_applied_total` has grown by as many).
//!
//! `--cores-per-process N` runs each server process under `taskset`: the NATS servers on the
//! first slots of N cores, single-node serve and each instance on the next ones (instance i of
//! every configuration on the same cores, single-node serve on instance 0's), wrapping around when
//! the machine has fewer cores; the load generator (this process) gets the cores left over, if any.
//! On a machine with enough cores, `--instances 1,2,4 --cores-per-process 2` shows instances that
//! each bring their own cores. Without it every process shares every core. `--before PATH` runs
//! the cluster rows a second time with another `bursar` binary (an older build) in the same run,
//! and `--rounds R` repeats everything R times and gives each ratio's range.
//!
//! `--floor` measures instead what the journal costs the NATS servers whatever bursar does: a
//! fresh 3-node cluster, an R3 stream, and messages of 1, 3, 8, 12 and 32 journal entries' size
//! (1 KiB each) published one at a time as a writer does (each acknowledged before the next), with
//! the NATS servers' CPU ms per message and per entry: a replicated message costs about the same
//! whatever it holds, so an admission costs the servers their cost per message over the entries a
//! message holds.
//! Every loop is bounded by count or deadline; only 127.0.0.1 is contacted.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bursar_testkit::{NatsCluster, Server, TempDir};
use common::{Run, get, load, metric, submit_line};

const USAGE: &str = "usage: bursar-cluster-bench [--admissions N] [--events N] [--concurrency C] [--batch B] [--lifecycle] [--instances 1,2] [--partitions P] [--warmup N] [--idle-ms MS] [--cores-per-process N] [--rounds R] [--bursar PATH] [--before PATH] [--floor]";

/// Projects the submissions spread over.
const PROJECTS: usize = 40;

struct Opts {
    admissions: usize,
    warmup: usize,
    idle: Duration,
    events: usize,
    concurrency: usize,
    batch: usize,
    lifecycle: bool,
    instances: Vec<usize>,
    partitions: u32,
    cores_per_process: Option<usize>,
    rounds: usize,
    bursar: PathBuf,
    before: Option<PathBuf>,
    floor: bool,
}

fn parse_opts() -> Result<Opts, String> {
    let beside = std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("bursar");
    let mut o = Opts {
        admissions: 3000,
        warmup: 300,
        idle: Duration::from_millis(1000),
        events: 20_000,
        concurrency: 8,
        batch: 100,
        lifecycle: false,
        instances: vec![1, 2],
        partitions: 16,
        cores_per_process: None,
        rounds: 1,
        bursar: beside,
        before: None,
        floor: false,
    };
    let mut args = common::Args::new(USAGE);
    while let Some(a) = args.flag() {
        match a.as_str() {
            "--admissions" => o.admissions = args.number("--admissions", 10..=1_000_000)?,
            "--warmup" => o.warmup = args.number("--warmup", 0..=100_000)?,
            "--idle-ms" => o.idle = Duration::from_millis(args.number("--idle-ms", 0..=60_000)? as u64),
            "--events" => o.events = args.number("--events", 0..=10_000_000)?,
            "--concurrency" => o.concurrency = args.number("--concurrency", 1..=256)?,
            "--batch" => o.batch = args.number("--batch", 1..=10_000)?,
            "--lifecycle" => o.lifecycle = true,
            "--floor" => o.floor = true,
            "--partitions" => o.partitions = args.number("--partitions", 1..=4096)? as u32,
            "--cores-per-process" => o.cores_per_process = Some(args.number("--cores-per-process", 1..=1024)?),
            "--rounds" => o.rounds = args.number("--rounds", 1..=20)?,
            "--bursar" => o.bursar = PathBuf::from(args.value("--bursar")?),
            "--before" => o.before = Some(PathBuf::from(args.value("--before")?)),
            "--instances" => {
                let v = args.value("--instances")?;
                o.instances = v
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().ok().filter(|n| (1..=8).contains(n)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("`--instances` takes counts from 1 to 8, comma-separated")?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(args.unknown(other)),
        }
    }
    for b in std::iter::once(&o.bursar).chain(&o.before) {
        if !o.floor && !b.is_file() {
            return Err(format!(
                "no `bursar` binary at {} (build it: cargo build --release -p bursar --bin bursar; or give --bursar PATH)",
                b.display()
            ));
        }
    }
    Ok(o)
}

/// Which cores each server process runs on (`--cores-per-process`).
struct Cores {
    all: Vec<usize>,
    per: Option<usize>,
}

/// Slot of the first NATS server; slots 3.. are single-node serve and the instances.
const NATS_SLOTS: usize = 3;

impl Cores {
    fn new(per: Option<usize>) -> Cores {
        let all = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_owned())))
            .map(|list| parse_cpu_list(&list))
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect());
        Cores { all, per }
    }

    /// The cores of slot `i` (`None`: not pinned).
    fn slot(&self, i: usize) -> Option<Vec<usize>> {
        let per = self.per?;
        Some((0..per).map(|k| self.all[(i * per + k) % self.all.len()]).collect())
    }

    /// The cores no slot up to `slots` uses (for the load generator).
    fn left_over(&self, slots: usize) -> Option<Vec<usize>> {
        let per = self.per?;
        let used = slots * per;
        (used < self.all.len()).then(|| self.all[used..].to_vec())
    }

    /// The command that runs `program` on slot `i`'s cores.
    fn command(&self, i: usize, program: &Path) -> (PathBuf, Vec<std::ffi::OsString>) {
        match self.slot(i) {
            Some(cores) => (PathBuf::from("taskset"), vec!["-c".into(), list(&cores).into(), program.into()]),
            None => (program.to_owned(), Vec::new()),
        }
    }

    /// Moves the running process `pid` (every thread) to slot `i`'s cores.
    fn pin(&self, pid: u32, cores: Option<Vec<usize>>) -> Result<(), String> {
        let Some(cores) = cores else { return Ok(()) };
        let out = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", &list(&cores), &pid.to_string()])
            .output()
            .map_err(|e| format!("cannot run taskset: {e}"))?;
        if !out.status.success() {
            return Err(format!("taskset {pid}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(())
    }
}

fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.trim().parse::<usize>().ok()),
        }
    }
    out
}

fn list(cores: &[usize]) -> String {
    cores.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// CPU time of process `pid` so far (every thread, `utime + stime`), in seconds.
fn cpu_seconds(pid: u32, ticks: f64) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // The fields after the command name, which is in parentheses and may hold spaces: state is
    // field 3, utime 14, stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (n(11) + n(12)) / ticks
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// A `bursar serve` child process, stopped by PID when dropped.
struct Bursar {
    server: Server,
    addr: SocketAddr,
}

impl Bursar {
    fn start(
        bin: &Path,
        dir: &Path,
        name: &str,
        cores: &Cores,
        slot: usize,
        cluster: &[String],
    ) -> Result<Bursar, String> {
        let policies = dir.join("policies");
        let port_file = dir.join(format!("{name}.port"));
        let _ = std::fs::remove_file(&port_file);
        let (program, mut args) = cores.command(slot, bin);
        for a in ["serve", "--policies"] {
            args.push(a.into());
        }
        args.push(policies.into());
        args.push("--audit".into());
        args.push(dir.join(format!("{name}.db")).into());
        for a in ["--listen", "127.0.0.1:0", "--fast-commit", "--no-watch", "--log-level", "warn", "--port-file"] {
            args.push(a.into());
        }
        args.push(port_file.clone().into());
        args.extend(cluster.iter().map(Into::into));
        let log = dir.join(format!("{name}.log"));
        let mut server = Server::start(name, &program, &args, &log).map_err(|e| e.to_string())?;
        let mut addr = None;
        server
            .wait_until("answering", Duration::from_secs(60), || {
                let port = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse::<u16>().ok());
                addr = port.map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
                addr.is_some_and(|a| get(a, "/healthz").is_ok_and(|(s, _)| s == 200))
            })
            .map_err(|e| e.to_string())?;
        let addr = addr.ok_or("no port")?;
        Ok(Bursar { server, addr })
    }
}

/// What the processes had done at one instant.
#[derive(Debug, Clone, Default)]
struct Sample {
    /// CPU seconds of the bursar processes (serve, or the instances).
    bursar_cpu: f64,
    /// CPU seconds of the NATS servers.
    nats_cpu: f64,
    /// Bytes and messages the instances published to NATS.
    published_bytes: f64,
    published_msgs: f64,
    /// Summed counters of the instances' `/metrics`.
    counters: Vec<f64>,
}

const COUNTERS: [&str; 7] = [
    "bursar_cluster_admissions_decided_total",
    "bursar_cluster_admit_ask_seconds_total",
    "bursar_cluster_journal_flushes_total",
    "bursar_cluster_journal_entries_total",
    "bursar_cluster_events_applied_total",
    // Since issue 54 an instance's partitions share its journal messages (before, a flush was a
    // message).
    "bursar_cluster_journal_messages_total",
    "bursar_cluster_journal_message_entries_total",
];

/// The servers of one configuration.
struct Setup<'a> {
    bursar: Vec<Bursar>,
    nats: Option<(&'a mut NatsCluster, Vec<u32>)>,
    ticks: f64,
}

impl Setup<'_> {
    fn addrs(&self) -> Vec<SocketAddr> {
        self.bursar.iter().map(|b| b.addr).collect()
    }

    fn sample(&self) -> Sample {
        let mut s = Sample {
            bursar_cpu: self.bursar.iter().map(|b| cpu_seconds(b.server.pid(), self.ticks)).sum(),
            ..Sample::default()
        };
        if let Some((nats, pids)) = &self.nats {
            s.nats_cpu = pids.iter().map(|p| cpu_seconds(*p, self.ticks)).sum();
            for i in 0..NATS_SLOTS {
                let Some(m) = nats.monitor(i) else { continue };
                let Ok((200, text)) = get(m, "/connz?limit=4096") else { continue };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
                for c in v["connections"].as_array().into_iter().flatten() {
                    if c["name"].as_str().is_some_and(|n| n.starts_with("bursar ")) {
                        s.published_bytes += c["in_bytes"].as_f64().unwrap_or(0.0);
                        s.published_msgs += c["in_msgs"].as_f64().unwrap_or(0.0);
                    }
                }
            }
            let texts: Vec<String> =
                self.addrs().iter().filter_map(|a| get(*a, "/metrics").ok()).map(|(_, t)| t).collect();
            s.counters = COUNTERS.iter().map(|c| texts.iter().map(|t| metric(t, c)).sum()).collect();
        }
        s
    }

    fn stop(self) {
        for mut b in self.bursar {
            let _ = b.server.stop();
        }
    }
}

/// One configuration's figures.
struct Row {
    name: String,
    admit: Run,
    cpu_ms: f64,
    bursar_cpu_ms: f64,
    nats_cpu_ms: f64,
    bytes: f64,
    msgs: f64,
    entries_per_commit: f64,
    ask_ms: f64,
    /// CPU ms per second with no load, of the bursar processes and of the NATS servers.
    idle_bursar: f64,
    idle_nats: f64,
    events_per_s: f64,
    cluster: bool,
}

impl Row {
    /// CPU ms per 1,000 admissions less what the processes spend with no load over as long.
    fn busy_cpu_ms(&self) -> f64 {
        let idle = (self.idle_bursar + self.idle_nats) * self.admit.wall.as_secs_f64();
        (self.cpu_ms - idle * 1000.0 / self.admit.micros.len().max(1) as f64).max(0.0)
    }
}

/// The submissions of the run `tag`, each allowed job started and finished through the next
/// instance with `lifecycle`.
struct Admissions {
    tag: String,
    lifecycle: bool,
}

fn admission_load(o: &Opts, tag: &str) -> Admissions {
    Admissions { tag: tag.to_owned(), lifecycle: o.lifecycle }
}

impl common::Requests for Admissions {
    fn request(&self, n: usize) -> (&'static str, String, Vec<u8>) {
        ("POST", "/v1/admit".to_owned(), submit_line(&self.tag, n, PROJECTS).into_bytes())
    }

    fn then(&self, n: usize, body: &[u8]) -> Vec<(&'static str, String, Vec<u8>)> {
        if !self.lifecycle || !String::from_utf8_lossy(body).contains(r#""decision":"allow""#) {
            return Vec::new();
        }
        let (tag, time) = (&self.tag, bursar_serve::wall_time().to_string());
        let body = format!(
            "{{\"id\":\"{tag}-b{n}\",\"time\":\"{time}\",\"type\":\"job.started\",\"job_id\":\"{tag}-j{n}\"}}\n{{\"id\":\"{tag}-f{n}\",\"time\":\"{time}\",\"type\":\"job.finished\",\"job_id\":\"{tag}-j{n}\",\"status\":\"succeeded\"}}\n"
        );
        vec![("POST", "/v1/events".to_owned(), body.into_bytes())]
    }
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

fn measure(name: &str, tag: &str, setup: &Setup<'_>, o: &Opts) -> Result<Row, String> {
    let addrs = setup.addrs();
    let cluster = setup.nats.is_some();
    if o.warmup > 0 {
        let warm = load(&addrs, o.warmup, o.concurrency, admission_load(o, &format!("{tag}w")))?;
        if warm.errors > 0 {
            return Err(format!("{name}: {} warm-up admissions failed", warm.errors));
        }
    }
    // What the processes spend with no load (lease renewals, heartbeats, ticks, NATS's own).
    let (idle_bursar, idle_nats) = if o.idle.is_zero() {
        (0.0, 0.0)
    } else {
        let (a, t) = (setup.sample(), Instant::now());
        std::thread::sleep(o.idle);
        let (b, secs) = (setup.sample(), t.elapsed().as_secs_f64());
        ((b.bursar_cpu - a.bursar_cpu) * 1e3 / secs, (b.nats_cpu - a.nats_cpu) * 1e3 / secs)
    };
    let before = setup.sample();
    let admit = load(&addrs, o.admissions, o.concurrency, admission_load(o, tag))?;
    let after = setup.sample();
    if admit.errors > 0 {
        return Err(format!("{name}: {} admissions (or their job events) failed", admit.errors));
    }
    let n = admit.micros.len().max(1) as f64;
    let d = |f: fn(&Sample) -> f64| f(&after) - f(&before);
    let c = |i: usize| after.counters.get(i).copied().unwrap_or(0.0) - before.counters.get(i).copied().unwrap_or(0.0);
    let (bursar_cpu, nats_cpu) = (d(|s| s.bursar_cpu), d(|s| s.nats_cpu));
    let mut row = Row {
        name: name.to_owned(),
        cpu_ms: (bursar_cpu + nats_cpu) * 1e6 / n,
        bursar_cpu_ms: bursar_cpu * 1e6 / n,
        nats_cpu_ms: nats_cpu * 1e6 / n,
        bytes: d(|s| s.published_bytes) / n,
        msgs: d(|s| s.published_msgs) / n,
        entries_per_commit: if c(5) > 0.0 { c(6) / c(5) } else { c(3) / c(2).max(1.0) },
        ask_ms: c(1) * 1e3 / c(0).max(1.0),
        idle_bursar,
        idle_nats,
        admit,
        events_per_s: 0.0,
        cluster,
    };
    if o.events > 0 {
        let before = setup.sample();
        let started = Instant::now();
        let (t, jobs, batch) = (tag.to_owned(), o.admissions, o.batch);
        let posts = o.events.div_ceil(batch);
        let run = load(&addrs, posts, o.concurrency, move |n| {
            ("POST", "/v1/events".to_owned(), samples(&t, n * batch, batch, jobs).into_bytes())
        })?;
        let total = (posts * batch) as f64;
        if cluster {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                let applied = setup.sample().counters.get(4).copied().unwrap_or(0.0)
                    - before.counters.get(4).copied().unwrap_or(0.0);
                if applied >= total {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("{name}: only {applied} of {total} events applied"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if run.errors > 0 {
            return Err(format!("{name}: {} event posts failed", run.errors));
        }
        row.events_per_s = total / started.elapsed().as_secs_f64();
    }
    Ok(row)
}

fn live(addrs: &[SocketAddr]) -> Vec<usize> {
    addrs
        .iter()
        .map(|a| {
            get(*a, "/v1/cluster")
                .ok()
                .and_then(|(_, t)| serde_json::from_str::<bursar_model::api::ClusterView>(&t).ok())
                .map_or(0, |v| v.owned.iter().filter(|o| o.state == "live").count())
        })
        .collect()
}

/// Single-node serve on instance 0's cores.
/// What every configuration of a run shares: the options, the scratch folder, the cores, the clock.
struct Bench<'a> {
    o: &'a Opts,
    dir: &'a Path,
    cores: &'a Cores,
    ticks: f64,
}

fn single(b: &Bench<'_>, round: usize) -> Result<Row, String> {
    let (o, dir, cores, ticks) = (b.o, b.dir, b.cores, b.ticks);
    let b = Bursar::start(&o.bursar, dir, &format!("single-{round}"), cores, NATS_SLOTS, &[])?;
    let setup = Setup { bursar: vec![b], nats: None, ticks };
    let row = measure("single-node serve", &format!("sn{round}"), &setup, o);
    setup.stop();
    row
}

/// `n` cluster instances of `bin` on a fresh NATS cluster.
fn cluster(b: &Bench<'_>, n: usize, bin: &Path, label: &str, tag: &str) -> Result<Row, String> {
    let (o, dir, cores, ticks) = (b.o, b.dir, b.cores, b.ticks);
    let mut nats = NatsCluster::start(NATS_SLOTS).map_err(|e| e.to_string())?;
    let pids = nats.pids();
    for (i, pid) in pids.iter().enumerate() {
        cores.pin(*pid, cores.slot(i))?;
    }
    let url = nats.url();
    let mut bursar = Vec::new();
    for i in 0..n {
        let name = format!("{tag}-{i}");
        let flags =
            ["--cluster", &url, "--instance", &name, "--partitions", &o.partitions.to_string()].map(str::to_owned);
        bursar.push(Bursar::start(bin, dir, &name, cores, NATS_SLOTS + i, &flags)?);
    }
    let setup = Setup { bursar, nats: Some((&mut nats, pids)), ticks };
    let addrs = setup.addrs();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Every partition (the projects' and the ledger partition) live and shared out.
    let want = o.partitions as usize + 1;
    loop {
        let l = live(&addrs);
        if l.iter().sum::<usize>() >= want && l.iter().all(|c| *c >= want / n) {
            break;
        }
        if Instant::now() > deadline {
            setup.stop();
            return Err(format!("{label}: the partitions were not shared out ({l:?} live)"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let row = measure(label, tag, &setup, o);
    setup.stop();
    drop(nats);
    row
}

fn round(b: &Bench<'_>, r: usize) -> Result<Vec<Row>, String> {
    let o = b.o;
    let mut rows = vec![single(b, r)?];
    for &n in &o.instances {
        let label = if n == 1 { "cluster, 1 instance".to_owned() } else { format!("cluster, {n} instances") };
        rows.push(cluster(b, n, &o.bursar, &label, &format!("c{n}r{r}"))?);
        if let Some(before) = &o.before {
            rows.push(cluster(b, n, before, &format!("{label}, before"), &format!("b{n}r{r}"))?);
        }
    }
    Ok(rows)
}

fn table(o: &Opts, rows: &[Row]) {
    let base = &rows[0];
    let x = |a: f64, b: f64| a / b.max(1e-9);
    println!(
        "| configuration | admissions/s | × single | CPU ms per 1,000 admissions | × single | admit p50 ms | × single | p99 ms | × single |{}",
        if o.events > 0 { " events/s (applied) | × single |" } else { "" }
    );
    println!("|---|---|---|---|---|---|---|---|---|{}", if o.events > 0 { "---|---|" } else { "" });
    for r in rows {
        let ev = if o.events > 0 {
            format!(" {:.0} | {:.2} |", r.events_per_s, x(r.events_per_s, base.events_per_s))
        } else {
            String::new()
        };
        println!(
            "| {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |{ev}",
            r.name,
            r.admit.rate(),
            x(r.admit.rate(), base.admit.rate()),
            r.cpu_ms,
            x(r.cpu_ms, base.cpu_ms),
            r.admit.pct(0.5),
            x(r.admit.pct(0.5), base.admit.pct(0.5)),
            r.admit.pct(0.99),
            x(r.admit.pct(0.99), base.admit.pct(0.99)),
        );
    }
    println!();
    println!(
        "| configuration | CPU ms per 1,000: bursar processes | NATS servers | less idle | × single | idle CPU ms/s: bursar | NATS | bytes published per admission | NATS messages published per admission | journal entries per message | front waits for the owner ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let busy = format!("{:.0} | {:.2}", r.busy_cpu_ms(), x(r.busy_cpu_ms(), base.busy_cpu_ms()));
        if r.cluster {
            println!(
                "| {} | {:.0} | {:.0} | {busy} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.2} |",
                r.name,
                r.bursar_cpu_ms,
                r.nats_cpu_ms,
                r.idle_bursar,
                r.idle_nats,
                r.bytes,
                r.msgs,
                r.entries_per_commit,
                r.ask_ms
            );
        } else {
            println!("| {} | {:.0} | – | {busy} | {:.0} | – | – | – | – | – |", r.name, r.bursar_cpu_ms, r.idle_bursar);
        }
    }
}

/// Each ratio's range over the rounds.
fn summary(rounds: &[Vec<Row>]) {
    println!("\nover {} rounds (min–max of each round's ratio):\n", rounds.len());
    println!(
        "| configuration | admissions/s × single | CPU per admission × single | p50 × single | admissions/s × 1 instance |"
    );
    println!("|---|---|---|---|---|");
    let names: Vec<String> = rounds[0].iter().skip(1).map(|r| r.name.clone()).collect();
    for name in names {
        let mut v: [Vec<f64>; 4] = Default::default();
        for rows in rounds {
            let (base, Some(r)) = (&rows[0], rows.iter().find(|r| r.name == name)) else { continue };
            let one = rows
                .iter()
                .find(|x| x.name == name.replace(|c: char| c.is_ascii_digit(), "1").replace("instances", "instance"))
                .unwrap_or(r);
            v[0].push(r.admit.rate() / base.admit.rate().max(1e-9));
            v[1].push(r.cpu_ms / base.cpu_ms.max(1e-9));
            v[2].push(r.admit.pct(0.5) / base.admit.pct(0.5).max(1e-9));
            v[3].push(r.admit.rate() / one.admit.rate().max(1e-9));
        }
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            format!("{lo:.2}–{hi:.2}")
        };
        println!("| {name} | {} | {} | {} | {} |", range(&v[0]), range(&v[1]), range(&v[2]), range(&v[3]));
    }
}

/// `--floor`: the NATS servers' CPU per replicated message, by the entries it holds.
fn floor(o: &Opts, cores: &Cores, ticks: f64) -> Result<(), String> {
    let mut nats = NatsCluster::start(NATS_SLOTS).map_err(|e| e.to_string())?;
    let pids = nats.pids();
    for (i, pid) in pids.iter().enumerate() {
        cores.pin(*pid, cores.slot(i))?;
    }
    let url = nats.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let messages = o.admissions.min(5000);
    let rows = rt.block_on(async {
        let client = async_nats::connect(url.split(',').next().unwrap_or_default()).await.map_err(|e| e.to_string())?;
        let js = async_nats::jetstream::new(client);
        let config = async_nats::jetstream::stream::Config {
            name: "FLOOR".into(),
            subjects: vec!["floor.>".into()],
            num_replicas: 3,
            ..Default::default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match js.get_or_create_stream(config.clone()).await {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => return Err(e.to_string()),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let mut rows = Vec::new();
        for entries in [1usize, 3, 8, 12, 32] {
            let payload = axum::body::Bytes::from(vec![b'x'; entries * 1024]);
            let cpu = || pids.iter().map(|p| cpu_seconds(*p, ticks)).sum::<f64>();
            let (before, started) = (cpu(), Instant::now());
            for n in 0..messages {
                let ack = js.publish(format!("floor.w.{}", n % 2), payload.clone()).await.map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())?;
            }
            let (secs, ms) = (started.elapsed().as_secs_f64(), (cpu() - before) * 1e3);
            rows.push((entries, messages as f64 / secs, ms / messages as f64, ms / (messages * entries) as f64));
        }
        Ok::<_, String>(rows)
    })?;
    println!(
        "{messages} replicated (R3) messages per size, published one at a time, each acknowledged before the next\n"
    );
    println!("| entries per message (1 KiB each) | messages/s | NATS CPU ms per message | NATS CPU ms per entry |");
    println!("|---|---|---|---|");
    for (entries, rate, per_message, per_entry) in rows {
        println!("| {entries} | {rate:.0} | {per_message:.3} | {per_entry:.3} |");
    }
    drop(nats);
    Ok(())
}

fn run() -> Result<(), String> {
    let o = parse_opts()?;
    if NatsCluster::binary().is_none() {
        return Err("no nats-server binary (scripts/setup.sh installs it)".into());
    }
    let cores = Cores::new(o.cores_per_process);
    if o.floor {
        return floor(&o, &cores, clock_ticks());
    }
    let slots = NATS_SLOTS + o.instances.iter().copied().max().unwrap_or(1);
    cores.pin(std::process::id(), cores.left_over(slots))?;
    let dir = TempDir::new("cluster-bench").map_err(|e| e.to_string())?;
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).map_err(|e| e.to_string())?;
    std::fs::write(policies.join("set.toml"), common::POLICIES).map_err(|e| e.to_string())?;
    let ticks = clock_ticks();
    let load_avg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} admissions{} per configuration after {} not counted, {} clients, {} partitions; {} `job.sample` events in {}-line batches",
        o.admissions,
        if o.lifecycle { " (each allowed job started and finished through another instance)" } else { "" },
        o.warmup,
        o.concurrency,
        o.partitions,
        o.events,
        o.batch
    );
    println!(
        "cores {:?}; {}; load average before: {}",
        cores.all,
        match o.cores_per_process {
            Some(n) => format!(
                "{n} per process: NATS servers on {:?}, single-node serve and instance 0 on {:?}, instance 1 on {:?}, the load generator on {:?}",
                (0..NATS_SLOTS).filter_map(|i| cores.slot(i)).collect::<Vec<_>>(),
                cores.slot(NATS_SLOTS).unwrap_or_default(),
                cores.slot(NATS_SLOTS + 1).unwrap_or_default(),
                cores.left_over(slots).unwrap_or_else(|| cores.all.clone()),
            ),
            None => "every process on every core".to_owned(),
        },
        load_avg.trim()
    );
    let mut rounds = Vec::new();
    for r in 0..o.rounds {
        let rows = round(&Bench { o: &o, dir: dir.path(), cores: &cores, ticks }, r)?;
        println!("\nround {}:\n", r + 1);
        table(&o, &rows);
        rounds.push(rows);
    }
    if rounds.len() > 1 {
        summary(&rounds);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    common::exit("bursar-cluster-bench", run())
}
