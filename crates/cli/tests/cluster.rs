//! `bursar serve --cluster` end to end: a real 3-node NATS JetStream cluster on loopback and real
//! `bursar serve --cluster` processes, every one stopped by PID when the test ends, pass or fail.
//!
//! One NATS cluster serves the whole binary (`cluster_scenarios_on_one_nats_cluster`): each scenario
//! logs in as its own NATS account, so none sees another's streams, buckets or subjects, and bursar's
//! instances connect with the account's credentials in the URL, as a secured deployment would. The
//! scenarios:
//!
//! - `failover_loses_nothing_decides_nothing_twice_and_never_overshoots`: admissions and samples for
//!   many projects through all three instances while the owner of busy partitions is killed with
//!   SIGKILL, twice (the first victim restarted in between). Each partition is served again within
//!   the lease time plus one second (measured and printed); every admission that got an answer is in the decisions stream once,
//!   with the answered decision; no project's quota is overshot; every instance's audit log verifies.
//! - `a_paused_owner_writes_nothing_after_the_takeover`: SIGSTOP an owner past its lease, let another
//!   take over and write, SIGCONT it: no journal batch of its partitions and no snapshot chunk of an
//!   older epoch follows the new owner's fence, anywhere in the journal or on the snapshot subjects. Before the pause, on the same instances: a trial run in a project of one instance's partition lets a scale-up of the same
//!   configuration in a project of the other instance's partition through trial-before-scale.
//! - `shared_budgets_decide_as_one_engine`: user and team budgets across projects
//!   (`tests/data/shared-ledgers`), a stream of submissions, starts, finishes, approvals,
//!   rejections, charges and ticks sent one at a time (each event applied before the next is sent,
//!   `?wait_ms=`) through three instances: the owner of the ledger partition is killed with
//!   SIGKILL a third of the way in, and a fourth instance joins (planned handovers) two thirds in. `bursar eval` on the same stream is the one engine: every job's decisions must be the same.
//! - `a_cluster_instance_speaks_tls`: two instances with `--tls-cert`/`--tls-key`; an admission sent
//!   over https to the instance that does not own its partition is decided by the owner and answered
//!   over https; `/v1/cluster` and the decisions stream over https; plain HTTP gets no answer; a client
//!   without the CA is told to set `ca_file`.
//! - `write_budgets_hold_on_each_instance`: a principal with a budget of 4 events a minute, on two
//!   instances: previews are free, the fifth event through one instance is refused whole (429,
//!   `Retry-After`), an admission too, the other instance keeps its own count, `/metrics` counts
//!   the refusals.
//! - `an_owner_killed_in_the_middle_of_a_batch`: an owner SIGKILLed while its instance's journal
//!   writer holds a message of at least six admissions applied together, stalled there for the test
//!   (`BURSAR_TEST_JOURNAL_STALL`): first before the message is published — every admission of the
//!   batch is either answered and in the decisions stream once, as answered, or unanswered and not
//!   decided (and decided once when sent again); then after it is stored and before anything is
//!   answered — unanswered but stored, and a resend gets exactly the stored decision.

#![expect(clippy::unwrap_used, clippy::panic, reason = "a test")]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bursar_client::Conn;
use bursar_model::api::ClusterView;
use bursar_testkit::{NatsCluster, TempDir};
use serde_json::Value;

const QUOTA: &str = r#"[[policy]]
id = "quota/monthly"
description = "100 GPU-hours a month per project"
kind = "quota"
gpu_hours = 100
"#;

const TRIAL: &str = r#"[[policy]]
id = "trial/before-scale"
description = "Above 16 GPUs, a recent successful trial of the same configuration on 8 GPUs or fewer"
kind = "trial"
above_gpus = 16
trial_max_gpus = 8
within = "14d"
action = "deny"
"#;

const PARTITIONS: u32 = 8;

/// A running `bursar serve --cluster`, killed by PID when dropped.
struct Instance {
    name: String,
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    /// Over https, trusting this CA, when the instance was started with a certificate.
    https: Option<bursar_client::Client>,
    /// The bearer token of `get`, when the instance has principals.
    token: Option<String>,
}

impl Instance {
    fn start(url: &str, dir: &Path, name: &str, run: u32) -> Instance {
        Instance::start_with(url, dir, name, run, &[], None)
    }

    /// `start`, with `extra` flags; `ca`: the instance speaks https with a certificate of this CA.
    fn start_with(url: &str, dir: &Path, name: &str, run: u32, extra: &[&str], ca: Option<&Path>) -> Instance {
        Instance::start_env(url, dir, name, run, extra, ca, &[])
    }

    /// `start_with`, with `env` set in the instance's environment.
    fn start_env(
        url: &str,
        dir: &Path,
        name: &str,
        run: u32,
        extra: &[&str],
        ca: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Instance {
        let port_file = dir.join(format!("{name}.port"));
        let _ = std::fs::remove_file(&port_file);
        let log = dir.join(format!("{name}-{run}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_bursar"))
            .arg("serve")
            .arg("--policies")
            .arg(dir.join("policies"))
            .arg("--audit")
            .arg(dir.join(format!("{name}.db")))
            .args(["--listen", "127.0.0.1:0", "--port-file"])
            .arg(&port_file)
            .args(["--cluster", url, "--instance", name, "--partitions", &PARTITIONS.to_string()])
            .args(["--lease-ttl", "2s", "--snapshot-every", "1s", "--fast-commit", "--log-level", "info"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut i = Instance {
            name: name.to_owned(),
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            log,
            https: None,
            token: None,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = i.child.try_wait() {
                panic!("{name} exited ({st}):\n{}", i.log_text());
            }
            if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse::<u16>().ok()) {
                i.addr = SocketAddr::from(([127, 0, 0, 1], port));
                i.https = ca.map(|ca| {
                    bursar_client::Client::with_config(bursar_http::ClientConfig {
                        ca_file: Some(ca.to_owned()),
                        ..bursar_http::ClientConfig::new(format!("https://127.0.0.1:{port}"))
                    })
                    .unwrap()
                });
                if i.get("/healthz").is_some_and(|(s, _)| s == 200) {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "{name} did not start:\n{}", i.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn signal(&self, sig: &str) {
        assert!(Command::new("kill").args([sig, &self.pid()]).status().unwrap().success());
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        if let Some(c) = &self.https {
            let r = c.raw("GET", path, b"").ok()?;
            return Some((r.status, r.text()));
        }
        let mut c = Conn::connect(self.addr, self.token.as_deref()).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let r = c.request("GET", path, b"").ok()?;
        Some((r.status, r.text()))
    }

    fn view(&self) -> Option<ClusterView> {
        let (s, body) = self.get("/v1/cluster")?;
        (s == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    fn live(&self) -> Vec<u32> {
        self.view()
            .map(|v| v.owned.iter().filter(|o| o.state == "live").map(|o| o.partition).collect())
            .unwrap_or_default()
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // A stopped process cannot take SIGKILL's exit until continued; continue it first.
        let _ = Command::new("kill").args(["-CONT", &self.pid()]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn post(addr: SocketAddr, path: &str, body: &str) -> Option<(u16, Value)> {
    let mut c = Conn::connect(addr, None).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let r = c.request("POST", path, body.as_bytes()).ok()?;
    Some((r.status, r.json().unwrap_or(Value::Null)))
}

fn now() -> String {
    bursar_model::Timestamp::wall_clock().to_string()
}

fn submit(id: &str, job: &str, project: &str, gpus: u32, hours: f64) -> String {
    format!(
        r#"{{"id":"{id}","time":"{}","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"u","gpus":{gpus},"requested_hours":{hours},"ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        now()
    )
}

/// A project whose partition is `p` (a project partition: the ledger partition, number
/// `PARTITIONS`, has none).
fn project_in(p: u32, tag: &str) -> String {
    assert!(p < PARTITIONS, "partition {p} is the ledger partition: no project lives there");
    (0..).map(|i| format!("{tag}-{i}")).find(|n| bursar_cluster::partition::partition_of(n, PARTITIONS) == p).unwrap()
}

/// A scratch folder with the policies every instance loads.
fn scratch(name: &str) -> TempDir {
    let dir = TempDir::new(name).unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(dir.path().join("policies/quota.toml"), QUOTA).unwrap();
    std::fs::write(dir.path().join("policies/trial.toml"), TRIAL).unwrap();
    dir
}

/// The NATS accounts of the scenarios: one cluster for the whole binary, an account each, so no
/// scenario sees another's streams, buckets or subjects.
const FAILOVER: &str = "failover";
const PAUSED: &str = "paused";
const SHARED: &str = "shared";
const TLS: &str = "tls";
const BUDGET: &str = "budget";
const MIDBATCH: &str = "midbatch";

/// One scenario, run on the shared cluster.
type Scenario = fn(&NatsCluster);

#[test]
fn cluster_scenarios_on_one_nats_cluster() {
    if NatsCluster::binary().is_none() {
        return bursar_testkit::need::missing("nats-server", "scripts/setup.sh");
    }
    let nats = NatsCluster::start_with_accounts(3, &[FAILOVER, PAUSED, SHARED, TLS, BUDGET, MIDBATCH]).unwrap();
    let scenarios: [(&str, Scenario); 6] = [
        (
            "failover_loses_nothing_decides_nothing_twice_and_never_overshoots",
            failover_loses_nothing_decides_nothing_twice_and_never_overshoots,
        ),
        ("a_paused_owner_writes_nothing_after_the_takeover", a_paused_owner_writes_nothing_after_the_takeover),
        ("shared_budgets_decide_as_one_engine", shared_budgets_decide_as_one_engine),
        ("a_cluster_instance_speaks_tls", a_cluster_instance_speaks_tls),
        ("write_budgets_hold_on_each_instance", write_budgets_hold_on_each_instance),
        ("an_owner_killed_in_the_middle_of_a_batch", an_owner_killed_in_the_middle_of_a_batch),
    ];
    // Every scenario runs, whatever the one before it did; the first failure is re-raised after the
    // cluster is stopped (its instances were stopped as the failure unwound).
    let mut failures = Vec::new();
    for (name, run) in scenarios {
        eprintln!("--- scenario {name}");
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&nats))) {
            eprintln!("--- scenario {name} FAILED");
            failures.push((name, e));
        }
    }
    // A wrong password: serve stops with an error that names the servers but not the password.
    let dir = scratch("cluster-login");
    let wrong = nats.url_as(PAUSED).replace("paused:paused@", "paused:not-the-password@");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .arg("serve")
        .arg("--policies")
        .arg(dir.path().join("policies"))
        .arg("--audit")
        .arg(dir.path().join("a.db"))
        .args(["--listen", "127.0.0.1:0", "--cluster", &wrong, "--instance", "intruder"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("wrong password: {:?} after {:?}: {}", out.status, started.elapsed(), tail(&err, 5));
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("paused:***@") && !err.contains("not-the-password"), "{err}");
    drop(nats);
    let names: Vec<&str> = failures.iter().map(|(n, _)| *n).collect();
    if let Some((_, e)) = failures.into_iter().next() {
        eprintln!("failed scenarios: {names:?}");
        std::panic::resume_unwind(e);
    }
}

/// Waits until every partition is live somewhere and each instance has at least `min` of them.
fn wait_shared(instances: &[&Instance], min: usize) -> BTreeMap<u32, String> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let mut owners = BTreeMap::new();
        let mut ok = true;
        for i in instances {
            let live = i.live();
            ok &= live.len() >= min;
            for p in live {
                owners.insert(p, i.name.clone());
            }
        }
        // The projects' partitions and the ledger partition.
        if ok && owners.len() == PARTITIONS as usize + 1 {
            return owners;
        }
        assert!(Instant::now() < deadline, "partitions not shared out: {owners:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[derive(Debug, Clone)]
struct Answered {
    project: String,
    decision: String,
    gpu_hours: f64,
}

/// Load: admissions (and samples for the admitted jobs, sent through another instance) for many
/// projects, round-robin over the instances that are up.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    answered: Arc<Mutex<HashMap<String, Answered>>>,
    unanswered: Arc<AtomicU64>,
}

fn start_load(addrs: Arc<Mutex<Vec<SocketAddr>>>, projects: Vec<String>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(Mutex::new(HashMap::new()));
    let unanswered = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..3 {
        let (stop, answered, unanswered, addrs, projects) =
            (stop.clone(), answered.clone(), unanswered.clone(), addrs.clone(), projects.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            // Bounded: at most 3,000 submissions per thread, well past the test's length.
            while !stop.load(Ordering::Relaxed) && n < 3000 {
                n += 1;
                let project = &projects[(n as usize * 3 + t) % projects.len()];
                let (id, job) = (format!("t{t}-e{n}"), format!("t{t}-j{n}"));
                let list = addrs.lock().unwrap().clone();
                let to = list[(n as usize + t) % list.len()];
                match post(to, "/v1/admit", &submit(&id, &job, project, 1, 8.0)) {
                    Some((200, v)) => {
                        let decision = v["decision"].as_str().unwrap_or("").to_owned();
                        let gpu_hours = v["gpu_hours"].as_f64().unwrap_or(0.0);
                        answered.lock().unwrap().insert(id.clone(), Answered { project: project.clone(), decision: decision.clone(), gpu_hours });
                        if decision == "allow" {
                            let other = list[(n as usize + t + 1) % list.len()];
                            let sample = format!(
                                r#"{{"id":"s-{id}","time":"{}","type":"job.sample","job_id":"{job}","gpu_util":0.9,"mem_util":0.5}}"#,
                                now()
                            );
                            let _ = post(other, "/v1/events", &sample);
                        }
                    }
                    _ => {
                        unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    Load { stop, threads, answered, unanswered }
}

/// Kills the instance owning the most partitions while load runs; returns how long each of its
/// partitions took to answer admissions again, through `survivors`.
fn kill_owner_and_measure(
    victim: &mut Instance,
    survivors: &[SocketAddr],
    owners: &BTreeMap<u32, String>,
) -> Vec<(u32, Duration)> {
    // Its project partitions (admissions probe them; the ledger partition has no project).
    let partitions: Vec<u32> =
        owners.iter().filter(|(p, o)| **o == victim.name && **p < PARTITIONS).map(|(p, _)| *p).collect();
    assert!(!partitions.is_empty());
    victim.kill9();
    let killed = Instant::now();
    let mut times = Vec::new();
    for (k, p) in partitions.iter().enumerate() {
        let project = project_in(*p, "probe");
        let mut n = 0;
        loop {
            n += 1;
            let id = format!("probe-{}-{p}-{n}-{}", victim.name, killed.elapsed().as_nanos());
            let to = survivors[(k + n) % survivors.len()];
            if let Some((200, _)) = post(to, "/v1/admit", &submit(&id, &id, &project, 1, 0.01)) {
                times.push((*p, killed.elapsed()));
                break;
            }
            assert!(killed.elapsed() < Duration::from_secs(20), "partition {p} not served again after 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    times
}

fn verify(db: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar")).args(["audit", "verify", "--db"]).arg(db).output().unwrap();
    assert!(
        out.status.success(),
        "audit verify {}: {}{}",
        db.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn failover_loses_nothing_decides_nothing_twice_and_never_overshoots(nats: &NatsCluster) {
    let dir = scratch("cluster-failover");
    let url = nats.url_as(FAILOVER);
    let url = url.as_str();
    let d = dir.path();
    let mut b =
        vec![Instance::start(url, d, "b1", 1), Instance::start(url, d, "b2", 1), Instance::start(url, d, "b3", 1)];
    let owners = wait_shared(&[&b[0], &b[1], &b[2]], 2);
    eprintln!("partitions shared out: {owners:?}");
    let projects: Vec<String> = (0..12).map(|i| format!("proj-{i}")).collect();
    let addrs = Arc::new(Mutex::new(b.iter().map(|i| i.addr).collect::<Vec<_>>()));
    let load = start_load(addrs.clone(), projects.clone());
    std::thread::sleep(Duration::from_secs(2));

    // First failover: the owner of the most partitions, killed outright.
    let owners = wait_shared(&[&b[0], &b[1], &b[2]], 1);
    let victim = (0..3).max_by_key(|i| owners.values().filter(|o| **o == b[*i].name).count()).unwrap();
    let survivors: Vec<SocketAddr> = (0..3).filter(|i| *i != victim).map(|i| b[i].addr).collect();
    *addrs.lock().unwrap() = survivors.clone();
    let first = kill_owner_and_measure(&mut b[victim], &survivors, &owners);
    // Back with the same audit log; it rejoins and takes its share again by handover.
    b[victim] = Instance::start(url, d, &format!("b{}", victim + 1), 2);
    *addrs.lock().unwrap() = b.iter().map(|i| i.addr).collect();
    let owners = wait_shared(&[&b[0], &b[1], &b[2]], 2);
    std::thread::sleep(Duration::from_secs(1));

    // Second failover: another busy owner.
    let victim2 =
        (0..3).filter(|i| *i != victim).max_by_key(|i| owners.values().filter(|o| **o == b[*i].name).count()).unwrap();
    let survivors: Vec<SocketAddr> = (0..3).filter(|i| *i != victim2).map(|i| b[i].addr).collect();
    *addrs.lock().unwrap() = survivors.clone();
    let second = kill_owner_and_measure(&mut b[victim2], &survivors, &owners);
    std::thread::sleep(Duration::from_secs(1));
    // Enough answers for the checks below to mean something, however slow this machine is today
    // (a count of answers, not a rate: the load runs until it has them, up to a minute more).
    let enough = Instant::now() + Duration::from_secs(60);
    while load.answered.lock().unwrap().len() <= 200 && Instant::now() < enough {
        std::thread::sleep(Duration::from_millis(100));
    }
    load.stop.store(true, Ordering::Relaxed);
    for t in load.threads {
        t.join().unwrap();
    }

    for (round, times) in [("first", &first), ("second", &second)] {
        for (p, t) in times.iter() {
            eprintln!("failover {round}: partition {p} served again {} ms after SIGKILL", t.as_millis());
        }
    }
    // A dead owner's partitions are back within the lease time (2 s here) plus one second.
    for (p, t) in first.iter().chain(&second) {
        assert!(
            *t <= Duration::from_secs(3),
            "partition {p} took {t:?} to be served again (the bound is the 2 s lease + 1 s)"
        );
    }

    // Every decision, from the decisions stream, through a survivor.
    let reader = survivors[0];
    let mut c = Conn::connect(reader, None).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let r = c.request("GET", "/v1/decisions?after=0&follow=false", b"").unwrap();
    assert_eq!(r.status, 200);
    let mut admissions: HashMap<String, Vec<Value>> = HashMap::new();
    let mut last_cursor = 0;
    for line in r.text().lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let cursor = v["seq"].as_u64().unwrap();
        assert!(cursor > last_cursor, "cursors grow");
        last_cursor = cursor;
        if v["admission"] == true {
            admissions.entry(v["event_id"].as_str().unwrap().to_owned()).or_default().push(v);
        }
    }
    let answered = load.answered.lock().unwrap().clone();
    assert!(answered.len() > 200, "only {} admissions answered", answered.len());
    for (id, a) in &answered {
        let found =
            admissions.get(id).unwrap_or_else(|| panic!("answered admission {id} is not in the decisions stream"));
        assert_eq!(found.len(), 1, "admission {id} decided {} times", found.len());
        assert_eq!(found[0]["decision"].as_str(), Some(a.decision.as_str()), "{id}: answered otherwise than journaled");
    }
    for (id, ds) in &admissions {
        assert_eq!(ds.len(), 1, "{id} has {} admission decisions", ds.len());
    }
    // No overshoot: what was allowed per project, by the stream and by the answers.
    let mut allowed: HashMap<String, f64> = HashMap::new();
    for ds in admissions.values() {
        if ds[0]["decision"] == "allow" {
            *allowed.entry(ds[0]["project"].as_str().unwrap().to_owned()).or_default() +=
                ds[0]["gpu_hours"].as_f64().unwrap();
        }
    }
    for (project, h) in &allowed {
        assert!(*h <= 100.0 + 1e-9, "project {project} was allowed {h} GPU-hours of 100");
    }
    let denied = answered.values().filter(|a| a.decision == "deny").count();
    let allowed_answers: f64 = answered.values().filter(|a| a.decision == "allow").map(|a| a.gpu_hours).sum();
    assert!(denied > 0, "the quota was never reached: the test proves nothing about overshoot");
    eprintln!(
        "{} admissions answered ({} denied, {allowed_answers} GPU-hours allowed), {} not answered during failovers, {} decisions in the stream",
        answered.len(),
        denied,
        load.unanswered.load(Ordering::Relaxed),
        admissions.len()
    );
    // And by what the clients were told.
    let mut told: HashMap<&str, f64> = HashMap::new();
    for a in answered.values().filter(|a| a.decision == "allow") {
        *told.entry(a.project.as_str()).or_default() += a.gpu_hours;
    }
    for (project, h) in &told {
        assert!(*h <= 100.0 + 1e-9, "project {project}: clients were allowed {h} GPU-hours of 100");
    }

    // Every instance's audit log verifies (the killed one's as it was left).
    for i in b.iter_mut() {
        i.terminate();
    }
    for n in ["b1", "b2", "b3"] {
        verify(&d.join(format!("{n}.db")));
    }
    drop(b);
}

fn a_paused_owner_writes_nothing_after_the_takeover(nats: &NatsCluster) {
    let dir = scratch("cluster-paused");
    let url = nats.url_as(PAUSED);
    let url = url.as_str();
    let d = dir.path();
    let b1 = Instance::start(url, d, "b1", 1);
    let b2 = Instance::start(url, d, "b2", 1);
    // Nine partitions (eight projects' and the ledger partition) over two: balanced at five and four.
    let owners = wait_shared(&[&b1, &b2], 4);
    trial_history_reaches_every_partition(&b1, &b2, &owners);
    // What b1 owns now (not what it owned when `owners` was read: a balancing handover may have
    // moved one since), with the epoch it holds each by.
    let old_epochs: HashMap<u32, u64> = b1.view().unwrap().owned.iter().map(|o| (o.partition, o.epoch)).collect();
    let mut paused: Vec<u32> = old_epochs.keys().copied().filter(|p| *p < PARTITIONS).collect();
    paused.sort_unstable();
    assert!(!paused.is_empty(), "b1 owns no project partition: {old_epochs:?}");
    // Traffic for b1's partitions, so it has something to write.
    for (k, p) in paused.iter().enumerate() {
        let project = project_in(*p, "paused");
        let (s, _) =
            post(b2.addr, "/v1/admit", &submit(&format!("before-{k}"), &format!("jb-{k}"), &project, 1, 1.0)).unwrap();
        assert_eq!(s, 200);
    }
    b1.signal("-STOP");
    let stopped = Instant::now();
    // b2 takes every partition once b1's leases lapse, and decides for them.
    let deadline = Instant::now() + Duration::from_secs(20);
    while b2.live().len() != PARTITIONS as usize + 1 {
        assert!(Instant::now() < deadline, "b2 did not take over: {:?}", b2.live());
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("b2 took over every partition {} ms after SIGSTOP", stopped.elapsed().as_millis());
    let new_epochs: HashMap<u32, u64> = b2.view().unwrap().owned.iter().map(|o| (o.partition, o.epoch)).collect();
    let send = |tag: &str, to: SocketAddr| {
        for (k, p) in paused.iter().enumerate() {
            let project = project_in(*p, "paused");
            let id = format!("{tag}-{k}");
            let _ = post(to, "/v1/admit", &submit(&id, &id, &project, 1, 1.0));
            let sample = format!(
                r#"{{"id":"s-{id}","time":"{}","type":"job.sample","job_id":"jb-{k}","gpu_util":0.5,"mem_util":0.5}}"#,
                now()
            );
            let _ = post(to, "/v1/events", &sample);
        }
    };
    send("during", b2.addr);
    b1.signal("-CONT");
    // b1 wakes with events queued for partitions it no longer owns; whatever it tries must fail.
    std::thread::sleep(Duration::from_millis(500));
    send("after", b1.addr);
    send("after2", b2.addr);
    std::thread::sleep(Duration::from_secs(3));
    let log = b1.log_text();
    eprintln!(
        "b1 after SIGCONT: {} fenced writes; its log:\n{}",
        metric(&b1, "bursar_cluster_fenced_writes_total"),
        tail(&log, 12)
    );

    // Read the whole journal (every instance's writer puts its partitions' batches, one line each,
    // into its messages) and every snapshot subject of the partitions b1 had: nothing of b1's epoch
    // for them after b2's fence.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let mut config = bursar_cluster::ClusterConfig::new(url, "reader", d.join("reader.db"));
        config.partitions = PARTITIONS;
        let n = bursar_cluster::nats::Nats::connect(&config).await.unwrap();
        let last = n.journal.get_info().await.unwrap().state.last_sequence;
        let mut fenced_at: HashMap<u32, u64> = HashMap::new();
        let mut after_fence: HashMap<u32, u64> = HashMap::new();
        bursar_cluster::snapshot::read_subject(&n.journal, "bursar.journal.>", 1, |seq, m| {
            for b in bursar_cluster::wire::batches(&m.payload) {
                let b = b.unwrap();
                let Some(new) = new_epochs.get(&b.partition).filter(|_| paused.contains(&b.partition)) else {
                    continue;
                };
                if b.epoch >= *new {
                    fenced_at.entry(b.partition).or_insert(seq);
                }
                if let Some(f) = fenced_at.get(&b.partition) {
                    assert!(
                        b.epoch >= *new,
                        "partition {}: journal message {seq} holds a batch of epoch {} after the fence of epoch {new} at {f}",
                        b.partition,
                        b.epoch
                    );
                    *after_fence.entry(b.partition).or_default() += 1;
                }
            }
            Ok(seq < last)
        })
        .await
        .unwrap();
        for p in &paused {
            let (old, new) = (old_epochs[p], new_epochs[p]);
            assert!(new > old, "partition {p}: epoch {new} after {old}");
            assert!(fenced_at.contains_key(p), "partition {p}: no batch or fence of the new owner in the journal");
            eprintln!(
                "partition {p}: {} journal batches from the fence on, none of the old epoch {old}",
                after_fence.get(p).copied().unwrap_or(0)
            );
            let subject = bursar_cluster::partition::snapshot_subject(*p);
            let last = bursar_cluster::snapshot::last_on_subject(&n.snapshots, &subject).await.unwrap();
            let mut fenced_at = None;
            let mut after_fence = 0;
            bursar_cluster::snapshot::read_subject(&n.snapshots, &subject, 1, |seq, m| {
                let epoch: u64 = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(bursar_cluster::wire::EPOCH_HEADER))
                    .and_then(|v| v.as_str().parse().ok())
                    .unwrap();
                if epoch >= new && fenced_at.is_none() {
                    fenced_at = Some(seq);
                }
                if let Some(f) = fenced_at {
                    assert!(epoch >= new, "{subject}: message {seq} of epoch {epoch} after the fence of epoch {new} at {f}");
                    after_fence += 1;
                }
                Ok(seq < last)
            })
            .await
            .unwrap();
            assert!(fenced_at.is_some(), "{subject}: no message of the new owner");
            eprintln!("{subject}: {after_fence} messages from the fence on, none of the old epoch {old}");
            // The snapshot pointer is the new owner's.
            let e = n.pointers.entry(bursar_cluster::partition::partition_key(*p)).await.unwrap().unwrap();
            let ptr: bursar_cluster::wire::SnapshotPointer = serde_json::from_slice(&e.value).unwrap();
            assert!(ptr.epoch >= new, "partition {p}: the pointer was written by epoch {}", ptr.epoch);
        }
    });
    // And b1 does not own anything it was fenced out of.
    let still: Vec<u32> = b1
        .view()
        .map(|v| {
            v.owned
                .iter()
                .map(|o| o.partition)
                .filter(|p| new_epochs.contains_key(p) && b2.live().contains(p))
                .collect()
        })
        .unwrap_or_default();
    assert!(still.is_empty(), "b1 still claims {still:?}");
    drop((b1, b2));
}

/// A job of one configuration (image, dataset, script) in `project`.
fn configured(id: &str, job: &str, project: &str, gpus: u32, image: &str) -> String {
    format!(
        r#"{{"id":"{id}","time":"{}","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"u","gpus":{gpus},"requested_hours":1.0,"image":"{image}","dataset":"ds-7","script_hash":"f00d","ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        now()
    )
}

/// The trial runs in a partition b1 owns; the scale-up goes to a partition b2 owns, through b2. The
/// run fact (`run.recorded`) b1's owner sends must reach b2's partition before the scale-up is let
/// through; a configuration with no trial anywhere stays denied.
fn trial_history_reaches_every_partition(b1: &Instance, b2: &Instance, owners: &BTreeMap<u32, String>) {
    let pa = *owners.iter().find(|(p, o)| *o == "b1" && **p < PARTITIONS).unwrap().0;
    let pb = *owners.iter().find(|(p, o)| *o == "b2" && **p < PARTITIONS).unwrap().0;
    let (small, big) = (project_in(pa, "trial-small"), project_in(pb, "trial-big"));
    let admit = |to: SocketAddr, body: &str| {
        let (s, d) = post(to, "/v1/admit", body).unwrap();
        assert_eq!(s, 200, "{d}");
        d["decision"].as_str().unwrap().to_owned()
    };
    // Without a trial anywhere, the scale-up is denied in either partition.
    assert_eq!(admit(b2.addr, &configured("t-big-0", "t-big-0", &big, 32, "img:1")), "deny");
    assert_eq!(admit(b1.addr, &configured("t-small", "t-small", &small, 8, "img:1")), "allow");
    let events = format!(
        "{{\"id\":\"t-start\",\"time\":\"{}\",\"type\":\"job.started\",\"job_id\":\"t-small\"}}\n{{\"id\":\"t-end\",\"time\":\"{}\",\"type\":\"job.finished\",\"job_id\":\"t-small\",\"status\":\"succeeded\"}}\n",
        now(),
        now()
    );
    let (s, r) = post(b1.addr, "/v1/events", &events).unwrap();
    assert_eq!(s, 200, "{r}");
    let sent = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let id = format!("t-big-{tries}");
        if admit(b2.addr, &configured(&id, &id, &big, 32, "img:1")) == "allow" {
            break;
        }
        assert!(sent.elapsed() < Duration::from_secs(15), "the trial never reached partition {pb}");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("the trial in partition {pa} let partition {pb} admit the scale-up after {:?}", sent.elapsed());
    // Another configuration has no trial: still denied.
    assert_eq!(admit(b2.addr, &configured("t-other", "t-other", &big, 32, "img:2")), "deny");
    let sent_total: u64 = [b1, b2]
        .iter()
        .filter_map(|i| metric(i, "bursar_cluster_run_facts_sent_total").rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(sent_total, u64::from(PARTITIONS - 1), "one fact per other partition");
}

fn metric(i: &Instance, name: &str) -> String {
    i.get("/metrics")
        .and_then(|(_, t)| t.lines().find(|l| l.starts_with(&format!("{name} "))).map(|l| l.to_owned()))
        .unwrap_or_default()
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Projects of the shared-ledgers policies (`tests/data/shared-ledgers/policies/tags.toml` gives
/// their teams; `audio` has none).
const SHARED_PROJECTS: [&str; 6] = ["nlp", "tts", "ranking", "vision", "video", "audio"];
const SHARED_USERS: [&str; 3] = ["alice", "bob", "dana"];

/// A small deterministic generator (xorshift64*), so a failure names a stream that can be rerun.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// What both sides must agree on about a decision (not its id or the event it is attributed to:
/// a clock tick's copy for partition `n` is `e@pN`).
fn seen(v: &Value) -> String {
    format!(
        "{} admission={} until={} policies={} reason={} gpu_hours={}",
        v["decision"], v["admission"], v["until"], v["policies"], v["reason"], v["gpu_hours"]
    )
}

fn by_job<'a>(lines: impl Iterator<Item = &'a str>) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let job = v["job_id"].as_str().unwrap_or("-").to_owned();
        m.entry(job).or_default().push(seen(&v));
    }
    m
}

/// Sends one line until it is applied: a submission to `/v1/admit` until it is answered (the same
/// event id each time, so a resend after a failover gets the first decision), anything else to
/// `/v1/events?wait_ms=` until its partition's owner has applied it. Returns the 503s met.
fn send_applied(to: &[SocketAddr], n: usize, line: &str, admission: bool) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut unavailable = 0;
    for attempt in 0.. {
        let addr = to[(n + attempt) % to.len()];
        let path = if admission { "/v1/admit" } else { "/v1/events?wait_ms=3000" };
        match post(addr, path, line) {
            Some((200, v)) if admission || v["applied"] == true => return unavailable,
            Some((503, _)) => unavailable += 1,
            Some((200, _)) | None => {}
            Some((s, v)) => panic!("{path} answered {s} to {line}: {v}"),
        }
        assert!(Instant::now() < deadline, "not applied within 30 s: {line}");
        std::thread::sleep(Duration::from_millis(50));
    }
    unavailable
}

fn shared_budgets_decide_as_one_engine(nats: &NatsCluster) {
    let dir = TempDir::new("cluster-shared").unwrap();
    let d = dir.path();
    let policies = d.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/shared-ledgers/policies");
    for f in ["quota.toml", "tags.toml"] {
        std::fs::copy(source.join(f), policies.join(f)).unwrap();
    }
    let url = nats.url_as(SHARED);
    let url = url.as_str();
    let mut b =
        vec![Instance::start(url, d, "b1", 1), Instance::start(url, d, "b2", 1), Instance::start(url, d, "b3", 1)];
    let owners = wait_shared(&[&b[0], &b[1], &b[2]], 1);
    let ledger_owner = owners[&PARTITIONS].clone();
    eprintln!("partitions shared out: {owners:?}; the ledger partition is {ledger_owner}'s");

    let mut rng = Rng(0x5eed_0033);
    let (mut jobs, mut lines): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut last = 0i64;
    let steps = 150;
    let mut unavailable = 0;
    let mut b4: Option<Instance> = None;
    for n in 0..steps {
        if n == steps / 3 {
            // The ledger partition's owner dies; its partitions, the ledger partition among them,
            // are the other's after its lease.
            let victim = b.iter().position(|i| i.name == ledger_owner).unwrap();
            b[victim].kill9();
            b.remove(victim);
            eprintln!("killed {ledger_owner} at step {n}");
        }
        if n == 2 * steps / 3 {
            // A planned scale-up: back to three, the new instance handed its share.
            b4 = Some(Instance::start(url, d, "b4", 1));
            eprintln!("b4 joined at step {n}");
        }
        let mut to: Vec<SocketAddr> = b.iter().map(|i| i.addr).collect();
        to.extend(b4.iter().map(|i| i.addr));
        // Event time from the wall clock, strictly increasing.
        let t = bursar_model::Timestamp::wall_clock().0.max(last + 1);
        last = t;
        let time = bursar_model::Timestamp(t).to_string();
        let id = format!("e{n}");
        let job = |r: &mut Rng| (!jobs.is_empty()).then(|| jobs[r.below(jobs.len() as u64) as usize].clone());
        let kind = rng.below(16);
        let line = match kind {
            0..=7 => {
                let project = SHARED_PROJECTS[rng.below(6) as usize];
                let user = SHARED_USERS[rng.below(3) as usize];
                let (gpus, hours) = (1 + rng.below(8), 1 + rng.below(24));
                let j = format!("j{n}");
                jobs.push(j.clone());
                format!(
                    r#"{{"id":"{id}","time":"{time}","type":"job.submitted","job":{{"id":"{j}","project":"{project}","user":"{user}","gpus":{gpus},"requested_hours":{hours}}}}}"#
                )
            }
            8..=9 => match job(&mut rng) {
                Some(j) => format!(r#"{{"id":"{id}","time":"{time}","type":"job.started","job_id":"{j}"}}"#),
                None => continue,
            },
            10..=11 => match job(&mut rng) {
                Some(j) => {
                    let status = ["succeeded", "failed"][rng.below(2) as usize];
                    format!(
                        r#"{{"id":"{id}","time":"{time}","type":"job.finished","job_id":"{j}","status":"{status}"}}"#
                    )
                }
                None => continue,
            },
            12..=13 => match job(&mut rng) {
                Some(j) => {
                    let answer = ["granted", "granted", "rejected"][rng.below(3) as usize];
                    format!(r#"{{"id":"{id}","time":"{time}","type":"approval.{answer}","job_id":"{j}","by":"carol"}}"#)
                }
                None => continue,
            },
            14 => match job(&mut rng) {
                Some(j) => {
                    // The project a charge names is the job's own: the index knows the job.
                    let submitted = lines.iter().find(|l| l.contains(&format!(r#""job":{{"id":"{j}""#))).unwrap();
                    let v: Value = serde_json::from_str(submitted).unwrap();
                    let project = v["job"]["project"].as_str().unwrap().to_owned();
                    let h = 1 + rng.below(30);
                    format!(
                        r#"{{"id":"{id}","time":"{time}","type":"billing.charge","project":"{project}","job_id":"{j}","gpu_hours":{h}.0,"amount":{h}.0}}"#
                    )
                }
                None => continue,
            },
            _ => format!(r#"{{"id":"{id}","time":"{time}","type":"clock.tick"}}"#),
        };
        unavailable += send_applied(&to, n, &line, kind <= 7);
        lines.push(line);
    }
    eprintln!("{} events sent one at a time; {unavailable} answers were 503 (then resent)", lines.len());

    // The one engine: the same lines, in the same order.
    let events = d.join("events.jsonl");
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .arg("eval")
        .arg("--policies")
        .arg(&policies)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let one = by_job(std::str::from_utf8(&out.stdout).unwrap().lines());

    // The cluster: every decision in the decisions stream, through the instance that stayed.
    let mut c = Conn::connect(b[0].addr, None).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let r = c.request("GET", "/v1/decisions?after=0&follow=false", b"").unwrap();
    assert_eq!(r.status, 200);
    let text = r.text();
    let cluster = by_job(text.lines());
    let denied_by = |m: &BTreeMap<String, Vec<String>>, policy: &str| {
        m.values().flatten().filter(|d| d.contains(policy) && !d.starts_with("\"allow\"")).count()
    };
    eprintln!(
        "one engine: {} jobs; refused or held by the user budget {}, by the team budget {}",
        one.len(),
        denied_by(&one, "quota/user-monthly"),
        denied_by(&one, "quota/team-weekly")
    );
    assert!(denied_by(&one, "quota/user-monthly") > 0 && denied_by(&one, "quota/team-weekly") > 0, "both budgets bite");
    for (job, decisions) in &one {
        assert_eq!(cluster.get(job), Some(decisions), "job {job}: the cluster decided otherwise than one engine");
    }
    assert_eq!(cluster.len(), one.len(), "the cluster decided about jobs one engine did not");
    // Nothing the ledger partition did was decided otherwise at a project's partition.
    for i in b.iter().chain(b4.iter()) {
        assert_eq!(metric(i, "bursar_cluster_ledger_mismatches_total"), "bursar_cluster_ledger_mismatches_total 0");
    }

    // Every journaled input keeps who sent it, across the front end → owner hop: the projection of
    // the instance that stayed shows the sender of an approval another instance may have taken.
    let granted = lines.iter().find(|l| l.contains("\"approval.granted\"")).unwrap();
    let job = serde_json::from_str::<Value>(granted).unwrap()["job_id"].as_str().unwrap().to_owned();
    let db = d.join(format!("{}.db", b[0].name));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
            .args(["audit", "--db"])
            .arg(&db)
            .args(["explain", &job])
            .output()
            .unwrap();
        let story = String::from_utf8_lossy(&out.stdout);
        if story.contains("approval.granted") {
            assert!(story.matches("from: anonymous (open)").count() >= 2, "{story}");
            break;
        }
        assert!(Instant::now() < deadline, "the projection never showed {job}'s approval:\n{story}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The set in force and its reloads, as in single-node serve.
    let survivor = &b[0];
    let (s, body) = survivor.get("/v1/policies").unwrap();
    assert_eq!(s, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    let before = view["digest"].as_str().unwrap().to_owned();
    assert_eq!(view["policies"].as_array().unwrap().len(), 3, "{body}");
    assert_eq!(view["last_reload"]["cause"], "startup", "{body}");
    assert!(metric(survivor, "bursar_last_reload_failed{part=\"policies\"}").ends_with(" 0"));
    std::fs::write(
        policies.join("extra.toml"),
        "[[policy]]\nid = \"quota/audio\"\ndescription = \"audio's own budget\"\nkind = \"quota\"\ngpu_hours = 50\n",
    )
    .unwrap();
    let (s, out) = post(survivor.addr, "/v1/reload", "").unwrap();
    assert_eq!(s, 200, "{out}");
    assert!(out["ok"] == true && out["digest"].as_str() != Some(before.as_str()), "{out}");
    let (_, body) = survivor.get("/v1/policies").unwrap();
    assert!(body.contains("quota/audio"), "{body}");
    let metrics = survivor.get("/metrics").unwrap().1;
    let info = format!("bursar_policy_set_info{{digest=\"{}\"}} 1", out["digest"].as_str().unwrap());
    assert!(metrics.contains(&info), "{info} not in /metrics");
    std::fs::write(
        policies.join("extra.toml"),
        "[[policy]]\nid = \"quota/audio\"\nkind = \"quota\"\ngpu_hours = \"many\"\n",
    )
    .unwrap();
    let (s, out) = post(survivor.addr, "/v1/reload", "").unwrap();
    assert_eq!(s, 422, "{out}");
    assert!(out["errors"].to_string().contains("extra.toml"), "{out}");
    assert!(metric(survivor, "bursar_last_reload_failed{part=\"policies\"}").ends_with(" 1"));
    assert!(!metric(survivor, "bursar_reloads_total{outcome=\"failed\"}").ends_with(" 0"));
    let (_, body) = survivor.get("/v1/policies").unwrap();
    assert!(body.contains("quota/audio"), "the set in force stays: {body}");
}

#[test]
fn check_names_the_quotas_the_ledger_partition_keeps() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/shared-ledgers/policies");
    let out = Command::new(env!("CARGO_BIN_EXE_bursar")).args(["check", "--cluster"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("quota.toml") && err.contains("`quota/user-monthly`") && err.contains("scope = \"user\""),
        "{err}"
    );
    assert!(err.contains("`quota/team-weekly`") && err.contains("the ledger partition keeps its ledgers"), "{err}");
    assert!(!err.contains("quota/project-monthly"), "a project quota stays in its partition: {err}");
}

fn a_cluster_instance_speaks_tls(nats: &NatsCluster) {
    use bursar_testkit::tls::TestCa;
    let dir = scratch("cluster-tls");
    let ca = TestCa::new("bursar cluster test CA").unwrap();
    let ca_file = ca.write(dir.path(), "ca").unwrap();
    let (cert, key) = ca.server().unwrap().write(dir.path(), "server").unwrap();
    let flags = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    let url = nats.url_as(TLS);
    let b1 = Instance::start_with(&url, dir.path(), "t1", 0, &flags, Some(&ca_file));
    let b2 = Instance::start_with(&url, dir.path(), "t2", 0, &flags, Some(&ca_file));
    let owners = wait_shared(&[&b1, &b2], 1);
    // A project whose partition t2 owns, admitted through t1: the owner decides, t1 answers.
    let p = *owners.iter().find(|(p, o)| **p < PARTITIONS && o.as_str() == "t2").unwrap().0;
    let project = project_in(p, "secure");
    let c1 = b1.https.as_ref().unwrap();
    let event = bursar_model::decode_event(&submit("tls-e1", "tls-j1", &project, 2, 1.0)).unwrap();
    let reply = c1.admit(&event).unwrap();
    assert_eq!(reply.admission.decision.job_id.as_deref(), Some("tls-j1"), "{reply:?}");
    assert_eq!(reply.admission.decision.project.as_deref(), Some(project.as_str()), "{reply:?}");
    // The decision reaches the other instance's stream, read over https.
    let c2 = b2.https.as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    'found: loop {
        let mut stream = c2.decisions(0, false).unwrap();
        while let Some(d) = stream.next_decision().unwrap() {
            if d.decision.job_id.as_deref() == Some("tls-j1") {
                break 'found;
            }
        }
        assert!(Instant::now() < deadline, "tls-j1 never reached t2's decisions stream");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(b2.view().unwrap().instance, "t2");
    // Plain HTTP to a TLS port gets no answer of the API; without the CA, the message names the setting.
    assert!(bursar_client::Client::new(b1.addr, None).pool().is_err());
    let untrusted = bursar_client::Client::with_config(bursar_http::ClientConfig::new(format!("https://{}", b1.addr)))
        .unwrap()
        .pool()
        .unwrap_err()
        .to_string();
    assert!(untrusted.contains("is not trusted") && untrusted.contains("set `ca_file`"), "{untrusted}");
    drop((b1, b2));
    verify(&dir.path().join("t1.db"));
    verify(&dir.path().join("t2.db"));
}

/// Issue 46 in a cluster (docs/cluster.md, "Write budgets"): each instance keeps the budgets of what
/// it takes. A principal allowed 4 events a minute sends them through `w1` (an admission and three
/// more submissions; previews are not charged); its next event and its next admission through `w1`
/// are refused whole with 429 and `Retry-After`, before they reach JetStream; `w2` keeps its own
/// count and takes one; `w1`'s `/metrics` counts the two refusals.
fn write_budgets_hold_on_each_instance(nats: &NatsCluster) {
    let dir = scratch("cluster-budget");
    let token = "bursar_test-cluster-budget-token";
    let hash = bursar_auth::TokenHash::of(token).to_text();
    let cfg = dir.path().join("bursar.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[principal]]\nname = \"p-sched\"\nroles = [\"scheduler\", \"producer\", \"reader\"]\ntokens = [\"{hash}\"]\nevents_per_minute = 4\n"
        ),
    )
    .unwrap();
    let url = nats.url_as(BUDGET);
    let flags = ["--config", cfg.to_str().unwrap()];
    let mut w1 = Instance::start_with(&url, dir.path(), "w1", 0, &flags, None);
    let mut w2 = Instance::start_with(&url, dir.path(), "w2", 0, &flags, None);
    let send = |i: &Instance, method: &str, path: &str, body: &str| {
        let mut c = Conn::connect(i.addr, Some(token)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let r = c.request(method, path, body.as_bytes()).unwrap();
        (r.status, r.headers.clone(), r.text())
    };
    // Every partition served (the view needs `read`; the budget counts only writes).
    w1.token = Some(token.to_owned());
    w2.token = Some(token.to_owned());
    wait_shared(&[&w1, &w2], 1);
    // The budget is per wall-clock minute: start the counted part with at least 20 s of it left.
    let second = bursar_model::Timestamp::wall_clock().millis().rem_euclid(60_000) / 1000;
    if second > 40 {
        std::thread::sleep(Duration::from_secs(u64::try_from(61 - second).unwrap()));
    }
    let project = project_in(0, "budget");
    for n in 0..6 {
        let (st, _, body) =
            send(&w1, "POST", "/v1/admit?test_only=true", &submit(&format!("bp{n}"), "bj0", &project, 1, 1.0));
        assert_eq!(st, 200, "preview {n}: {body}");
    }
    let (st, _, body) = send(&w1, "POST", "/v1/admit", &submit("b1", "bj1", &project, 1, 1.0));
    assert_eq!(st, 200, "{body}");
    let three: String = (2..5).map(|n| submit(&format!("b{n}"), &format!("bj{n}"), &project, 1, 1.0) + "\n").collect();
    let (st, _, body) = send(&w1, "POST", "/v1/events", &three);
    assert_eq!(st, 200, "{body}");
    let (st, head, body) = send(&w1, "POST", "/v1/events", &submit("b5", "bj5", &project, 1, 1.0));
    assert_eq!(st, 429, "{body}");
    assert!(head.iter().any(|(k, _)| k == "retry-after"), "{head:?}");
    assert!(body.contains("the principal `p-sched` may write 4 events"), "{body}");
    let (st, _, body) = send(&w1, "POST", "/v1/admit", &submit("b6", "bj6", &project, 1, 1.0));
    assert_eq!(st, 429, "{body}");
    let (st, _, body) = send(&w2, "POST", "/v1/events", &submit("b7", "bj7", &project, 1, 1.0));
    assert_eq!(st, 200, "w2 keeps its own count: {body}");
    let refused = "bursar_write_budget_refused_total{kind=\"principal\"}";
    assert_eq!(metric(&w1, refused), format!("{refused} 2"), "{}", w1.log_text());
    assert_eq!(metric(&w2, refused), format!("{refused} 0"));
}

/// What one admission of [`waves`] got: its event id, and the decision when it was answered.
type Sent = Vec<(String, Option<String>)>;

/// Every answered admission is in the decisions stream once, decided as it was answered.
fn each_answered_as_journaled(answered: &Sent, stream: &HashMap<String, Vec<Value>>) {
    for (id, a) in answered {
        let found = stream.get(id).unwrap_or_else(|| panic!("answered admission {id} is not in the decisions stream"));
        assert_eq!(found.len(), 1, "{id} decided {} times", found.len());
        assert_eq!(found[0]["decision"].as_str(), a.as_deref(), "{id}: answered otherwise than journaled");
    }
}

/// Waves of `wave` admissions sent together through `front` for `project`, until `owner`'s journal
/// writer says it stalled (at most 40 waves); every admission with what it got.
fn waves(front: SocketAddr, owner: &Instance, project: &str, tag: &str, wave: usize) -> Sent {
    let mut sent = Vec::new();
    for w in 0..40 {
        let threads: Vec<_> = (0..wave)
            .map(|k| {
                let (id, project) = (format!("{tag}-{w}-{k}"), project.to_owned());
                std::thread::spawn(move || {
                    let answer = match post(front, "/v1/admit", &submit(&id, &id, &project, 1, 0.01)) {
                        Some((200, v)) => v["decision"].as_str().map(str::to_owned),
                        _ => None,
                    };
                    (id, answer)
                })
            })
            .collect();
        sent.extend(threads.into_iter().map(|t| t.join().unwrap()));
        if owner.log_text().contains("test stall: the journal writer stops here") {
            return sent;
        }
    }
    panic!("{}'s journal writer never stalled:\n{}", owner.name, tail(&owner.log_text(), 20));
}

/// Every admission decision of the decisions stream, by event id.
fn admissions_in_stream(reader: SocketAddr) -> HashMap<String, Vec<Value>> {
    let mut c = Conn::connect(reader, None).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let r = c.request("GET", "/v1/decisions?after=0&follow=false", b"").unwrap();
    assert_eq!(r.status, 200);
    let mut out: HashMap<String, Vec<Value>> = HashMap::new();
    for line in r.text().lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["admission"] == true {
            out.entry(v["event_id"].as_str().unwrap().to_owned()).or_default().push(v);
        }
    }
    out
}

/// Waits until `survivor` owns every partition (the killed instance's taken over).
fn wait_took_all(survivor: &Instance) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while survivor.live().len() != PARTITIONS as usize + 1 {
        assert!(Instant::now() < deadline, "{} did not take over: {:?}", survivor.name, survivor.live());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A partition `owner` owns now (a project partition).
fn owned_by(owner: &Instance) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(p) = owner.live().into_iter().find(|p| *p < PARTITIONS) {
            return p;
        }
        assert!(Instant::now() < deadline, "{} owns no project partition", owner.name);
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn an_owner_killed_in_the_middle_of_a_batch(nats: &NatsCluster) {
    let dir = scratch("cluster-midbatch");
    let url = nats.url_as(MIDBATCH);
    let url = url.as_str();
    let d = dir.path();
    // The front end gives up on an admission after 1 s, before the 2 s lease of a killed owner can
    // lapse: what it did not get answered is not sent to the next owner behind the test's back.
    let flags = ["--admit-timeout", "1s"];
    let stall = bursar_cluster::journal::STALL_VAR;

    // 1. Killed with a batch applied and not yet stored: its writer stops before publishing the
    // first message of at least 6 entries (admissions that queued while the one before was being
    // stored), and the test kills it there.
    let mut b1 = Instance::start_env(url, d, "b1", 1, &flags, None, &[(stall, "before-publish:6")]);
    let b2 = Instance::start_with(url, d, "b2", 1, &flags, None);
    wait_shared(&[&b1, &b2], 4);
    let p = owned_by(&b1);
    let sent = waves(b2.addr, &b1, &project_in(p, "mid"), "before", 12);
    b1.kill9();
    wait_took_all(&b2);
    let stream = admissions_in_stream(b2.addr);
    let (answered, unanswered): (Sent, Sent) = sent.into_iter().partition(|(_, a)| a.is_some());
    each_answered_as_journaled(&answered, &stream);
    assert!(unanswered.len() >= 5, "the batch killed held {} unanswered admissions", unanswered.len());
    for (id, _) in &unanswered {
        assert!(!stream.contains_key(id), "unanswered admission {id} was decided: {:?}", stream[id]);
    }
    // Sent again, each is decided now, once.
    for (id, _) in &unanswered {
        let (s, v) = post(b2.addr, "/v1/admit", &submit(id, id, &project_in(p, "mid"), 1, 0.01)).unwrap();
        assert_eq!(s, 200, "{id}: {v}");
        assert_eq!(v["duplicate"], Value::Null, "{id} was decided before: {v}");
    }
    let stream = admissions_in_stream(b2.addr);
    for (id, _) in &unanswered {
        assert_eq!(stream.get(id).map(Vec::len), Some(1), "{id}: decided once when sent again");
    }
    eprintln!(
        "killed before its batch was stored: {} admissions answered (each in the stream once, as answered), {} unanswered and not decided; sent again, each decided once",
        answered.len(),
        unanswered.len()
    );

    // 2. Killed with a batch stored and nobody answered yet: unanswered but durable, and a resend
    // gets exactly the decision the journal holds (the window no crash-safe design closes: between
    // the replicated log's acknowledgement and the answer).
    let b1 = Instance::start_env(url, d, "b1", 2, &flags, None, &[(stall, "after-ack:6")]);
    wait_shared(&[&b1, &b2], 4);
    let mut b1 = b1;
    let p = owned_by(&b1);
    let sent = waves(b2.addr, &b1, &project_in(p, "mid"), "after", 12);
    b1.kill9();
    wait_took_all(&b2);
    let stream = admissions_in_stream(b2.addr);
    let (answered, unanswered): (Sent, Sent) = sent.into_iter().partition(|(_, a)| a.is_some());
    each_answered_as_journaled(&answered, &stream);
    let durable: Vec<&String> = unanswered.iter().map(|(id, _)| id).filter(|id| stream.contains_key(*id)).collect();
    assert!(durable.len() >= 5, "the stored batch held {} unanswered admissions", durable.len());
    for id in &durable {
        assert_eq!(stream[*id].len(), 1, "{id} decided {} times", stream[*id].len());
        let (s, v) = post(b2.addr, "/v1/admit", &submit(id, id, &project_in(p, "mid"), 1, 0.01)).unwrap();
        assert_eq!(s, 200, "{id}: {v}");
        assert_eq!(v["duplicate"], true, "{id}: a resend of a stored admission is answered from the journal: {v}");
        assert_eq!(v["decision"], stream[*id][0]["decision"], "{id}: the resend got another decision");
    }
    eprintln!(
        "killed after its batch was stored: {} answered, {} unanswered of which {} stored (a resend gets each one's stored decision)",
        answered.len(),
        unanswered.len(),
        durable.len()
    );
    drop((b1, b2));
}
