//! In-process cluster instances against one real 3-node NATS JetStream cluster for the whole binary
//! (each scenario logs in as its own NATS account, so none sees another's streams):
//!
//! - `admissions_from_any_instance_survive_a_handover`: admissions reach the owner from either
//!   instance, a resent submission gets the first decision, JetStream's and the engine's
//!   de-duplication agree, a handover keeps the quota state.
//! - `scaling_2_3_2_under_load_refuses_no_admission`: two instances under admission load, a third
//!   joins (partitions handed to it) and leaves (handed back), planned both ways: not one admission
//!   is answered 503, and every handover named its receiver instead of waiting for a lease.
//! - `runs_are_not_sent_where_no_policy_reads_them`: with no trial-before-scale policy, a finished
//!   run is written to no other partition.

#![expect(clippy::unwrap_used, reason = "a test")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bursar_cluster::{Cluster, ClusterConfig};
use bursar_engine::PolicySet;
use bursar_model::DecisionKind;
use bursar_session::{Origin, decode_body};
use bursar_testkit::{NatsCluster, TempDir};
use tokio::sync::watch;

const POLICY: &str = r#"[[policy]]
id = "quota/monthly"
description = "100 GPU-hours a month per project"
kind = "quota"
gpu_hours = 100
"#;

fn policies(dir: &TempDir) -> Arc<PolicySet> {
    let p = dir.path().join("policies");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("quota.toml"), POLICY).unwrap();
    Arc::new(bursar_loader::load_dir(&p, &bursar_loader::NoComponents).unwrap())
}

fn submit(id: &str, job: &str, project: &str, gpus: u32, hours: f64) -> String {
    format!(
        r#"{{"id":"{id}","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"u","gpus":{gpus},"requested_hours":{hours}}}}}"#
    )
}

fn config(nats: &NatsCluster, account: &str, dir: &TempDir, name: &str) -> ClusterConfig {
    let mut c = ClusterConfig::new(nats.url_as(account), name, dir.path().join(format!("{name}.db")));
    c.partitions = 4;
    c.lease_ttl = Duration::from_millis(1200);
    c.snapshot_every = Duration::from_millis(500);
    c.durable = false;
    c
}

/// Waits until `partitions` project partitions and the ledger partition are live among `clusters`.
async fn wait_live(clusters: &[&Cluster], partitions: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let partitions = partitions + 1;
    loop {
        let live: usize = clusters.iter().map(|c| c.status.live().len()).sum();
        if live == partitions {
            return;
        }
        assert!(Instant::now() < deadline, "only {live} of {partitions} partitions live");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn admit(c: &Cluster, line: &str) -> Result<bursar_model::api::AdmitReply, bursar_cluster::Refusal> {
    let (mut items, rejected) = decode_body(line.as_bytes(), 1 << 20, Origin::Producer);
    assert!(rejected.is_empty(), "{rejected:?}");
    c.front.admit(&items.remove(0)).await
}

const HANDOVER: &str = "handover";
const SCALE: &str = "scale";
const FANOUT: &str = "fanout";

/// One scenario, run on the shared cluster.
type Scenario = fn(&NatsCluster);

#[test]
fn cluster_scenarios_on_one_nats_cluster() {
    if NatsCluster::binary().is_none() {
        return bursar_testkit::need::missing("nats-server", "scripts/setup.sh");
    }
    let nats = NatsCluster::start_with_accounts(3, &[HANDOVER, SCALE, FANOUT]).unwrap();
    let scenarios: [(&str, Scenario); 3] = [
        ("admissions_from_any_instance_survive_a_handover", admissions_from_any_instance_survive_a_handover),
        ("scaling_2_3_2_under_load_refuses_no_admission", scaling_2_3_2_under_load_refuses_no_admission),
        ("runs_are_not_sent_where_no_policy_reads_them", runs_are_not_sent_where_no_policy_reads_them),
    ];
    let mut failures = Vec::new();
    for (name, run) in scenarios {
        eprintln!("--- scenario {name}");
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&nats))) {
            eprintln!("--- scenario {name} FAILED");
            failures.push(e);
        }
    }
    drop(nats);
    if let Some(e) = failures.into_iter().next() {
        std::panic::resume_unwind(e);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn counter(c: &Cluster, name: &str) -> f64 {
    let prefix = format!("{name} ");
    c.status.render().lines().find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

fn admissions_from_any_instance_survive_a_handover(nats: &NatsCluster) {
    let dir = TempDir::new("cluster-inproc").unwrap();
    let set = policies(&dir);
    let rt = runtime();
    rt.block_on(async {
        let (_tx, rx) = watch::channel(set.clone());
        let a = Cluster::start(config(nats, HANDOVER, &dir, "a"), rx.clone()).await.unwrap();
        wait_live(&[&a], 4).await;
        // 60 of 100 GPU-hours, decided by the owner (this instance).
        let first = admit(&a, &submit("e1", "j1", "nlp", 4, 15.0)).await.unwrap();
        assert_eq!(first.admission.decision.decision, DecisionKind::Allow);
        assert!(!first.duplicate);
        // The same submission again: the first decision, marked duplicate.
        let again = admit(&a, &submit("e1", "j1", "nlp", 4, 15.0)).await.unwrap();
        assert!(again.duplicate);
        assert_eq!(again.admission.seq, first.admission.seq);

        // A second instance joins; the partitions are shared out by handover.
        let b = Cluster::start(config(nats, HANDOVER, &dir, "b"), rx.clone()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        // Four project partitions and the ledger partition: three and two.
        while a.status.live().len() + b.status.live().len() != 5
            || a.status.live().len().abs_diff(b.status.live().len()) > 1
        {
            assert!(Instant::now() < deadline, "no fair share: a {:?}, b {:?}", a.status.live(), b.status.live());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Through b: the state (60 GPU-hours reserved) came along whoever owns `nlp` now.
        let over = admit(&b, &submit("e2", "j2", "nlp", 4, 15.0)).await.unwrap();
        assert_eq!(over.admission.decision.decision, DecisionKind::Deny, "{:?}", over.admission.decision.reason);
        let ok = admit(&b, &submit("e3", "j3", "nlp", 1, 10.0)).await.unwrap();
        assert_eq!(ok.admission.decision.decision, DecisionKind::Allow);

        // Events through the front end: a resend within the window is the stream's duplicate.
        let line = r#"{"id":"s1","time":"2026-11-02T09:05:00Z","type":"job.started","job_id":"j1"}"#;
        let (items, _) = decode_body(line.as_bytes(), 1 << 20, Origin::Producer);
        let p = b.front.publish(items.clone()).await.unwrap();
        assert!(!p[0].duplicate);
        let p = a.front.publish(items).await.unwrap();
        assert!(p[0].duplicate, "JetStream dropped the resend by its Nats-Msg-Id");

        // a leaves: b takes every partition, and the quota state is still there.
        a.shutdown().await;
        wait_live(&[&b], 4).await;
        let over = admit(&b, &submit("e4", "j4", "nlp", 4, 15.0)).await.unwrap();
        assert_eq!(over.admission.decision.decision, DecisionKind::Deny);

        // The decisions stream has every admission once, in order.
        let mut rx = b.front.decisions(0, false);
        let mut seen = Vec::new();
        while let Some(d) = rx.recv().await {
            let d = d.unwrap();
            if d.decision.admission {
                seen.push(d.decision.event_id.clone());
            }
        }
        assert_eq!(seen, ["e1", "e2", "e3", "e4"]);
        b.shutdown().await;
    });
    drop(rt);
    // Both audit logs are projections of the same stream, and both verify.
    for name in ["a", "b"] {
        let log = bursar_audit::AuditLog::open_read(dir.path().join(format!("{name}.db"))).unwrap();
        let report = bursar_audit::verify::verify(&log).unwrap();
        assert!(report.is_ok(), "{name}: {report:?}");
    }
}

/// Admission load through `fronts` until `stop`: every outcome counted, 503s apart.
struct Load {
    answered: Arc<AtomicU64>,
    unavailable: Arc<AtomicU64>,
    other: Arc<std::sync::Mutex<Vec<String>>>,
}

fn scaling_2_3_2_under_load_refuses_no_admission(nats: &NatsCluster) {
    let dir = TempDir::new("cluster-scale").unwrap();
    let set = policies(&dir);
    let rt = runtime();
    let cfg = |name: &str| {
        let mut c = config(nats, SCALE, &dir, name);
        c.partitions = 6;
        c.lease_ttl = Duration::from_secs(2);
        c
    };
    rt.block_on(async {
        let (_tx, rx) = watch::channel(set.clone());
        let a = Arc::new(Cluster::start(cfg("a"), rx.clone()).await.unwrap());
        let b = Arc::new(Cluster::start(cfg("b"), rx.clone()).await.unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        // Six project partitions and the ledger partition.
        while a.status.live().len() + b.status.live().len() != 7 || a.status.live().is_empty() || b.status.live().is_empty() {
            assert!(Instant::now() < deadline, "not shared out: a {:?}, b {:?}", a.status.live(), b.status.live());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // Load through the two instances that stay: 4 clients, each its own projects.
        let stop = Arc::new(AtomicBool::new(false));
        let load = Load { answered: Arc::default(), unavailable: Arc::default(), other: Arc::default() };
        let mut clients = Vec::new();
        for t in 0..4u32 {
            let front = if t % 2 == 0 { a.clone() } else { b.clone() };
            let (stop, answered, unavailable, other) =
                (stop.clone(), load.answered.clone(), load.unavailable.clone(), load.other.clone());
            clients.push(tokio::spawn(async move {
                // Bounded by count as well as by `stop`.
                for n in 0..20_000u32 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let project = format!("proj-{}", (n * 4 + t) % 24);
                    let line = submit(&format!("s{t}-{n}"), &format!("sj{t}-{n}"), &project, 1, 0.01);
                    match admit(&front, &line).await {
                        Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                        Err(r) if r.status == 503 => unavailable.fetch_add(1, Ordering::Relaxed),
                        Err(r) => {
                            other.lock().unwrap().push(format!("{}: {}", r.status, r.error));
                            0
                        }
                    };
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;

        // 2 → 3: c joins and is handed its share.
        let c = Cluster::start(cfg("c"), rx.clone()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let shared = |v: [usize; 3]| v.iter().sum::<usize>() == 7 && v.iter().all(|n| (2..=3).contains(n));
        while !shared([a.status.live().len(), b.status.live().len(), c.status.live().len()]) {
            assert!(
                Instant::now() < deadline,
                "no fair share of 3: a {:?}, b {:?}, c {:?}",
                a.status.live(),
                b.status.live(),
                c.status.live()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let at_three = load.answered.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let received_by_c = counter(&c, "bursar_cluster_handovers_received_total");
        let c_expired = counter(&c, "bursar_cluster_expired_takeovers_total");

        // 3 → 2: c leaves, handing each partition to a named receiver.
        c.shutdown().await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while a.status.live().len() + b.status.live().len() != 7 {
            assert!(Instant::now() < deadline, "c's partitions not taken back: a {:?}, b {:?}", a.status.live(), b.status.live());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        for t in clients {
            t.await.unwrap();
        }

        let answered = load.answered.load(Ordering::Relaxed);
        let unavailable = load.unavailable.load(Ordering::Relaxed);
        let received: f64 = [&a, &b].iter().map(|i| counter(i, "bursar_cluster_handovers_received_total")).sum();
        let expired: f64 = [&a, &b].iter().map(|i| counter(i, "bursar_cluster_expired_takeovers_total")).sum();
        let gap_max = [&a, &b, ]
            .iter()
            .map(|i| counter(i, "bursar_cluster_handover_gap_seconds_max"))
            .fold(0.0f64, f64::max);
        eprintln!(
            "scale 2 → 3 → 2: {answered} admissions answered ({at_three} by the time c was live), {unavailable} answered 503; c received {received_by_c} partitions by handover, a and b took {received} back; {} expired-lease takeovers; longest gap on a receiver {:.0} ms",
            expired + c_expired,
            gap_max * 1e3
        );
        let other = load.other.lock().unwrap().clone();
        assert!(other.is_empty(), "admissions refused: {other:?}");
        assert_eq!(unavailable, 0, "planned handovers must refuse no admission");
        assert!(answered > at_three && at_three > 0, "the load ran through both handovers");
        assert!(received_by_c >= 2.0, "c took its partitions by handover, not by lease expiry");
        assert!(received >= 2.0, "a and b took c's partitions back by handover");
        let a = Arc::try_unwrap(a).unwrap();
        let b = Arc::try_unwrap(b).unwrap();
        a.shutdown().await;
        b.shutdown().await;
    });
}

fn runs_are_not_sent_where_no_policy_reads_them(nats: &NatsCluster) {
    let dir = TempDir::new("cluster-fanout").unwrap();
    let set = policies(&dir);
    assert!(!set.reads_runs(), "the quota-only set reads no run history");
    let rt = runtime();
    rt.block_on(async {
        let (_tx, rx) = watch::channel(set.clone());
        let a = Cluster::start(config(nats, FANOUT, &dir, "a"), rx.clone()).await.unwrap();
        wait_live(&[&a], 4).await;
        let first = admit(&a, &submit("f1", "fj1", "nlp", 1, 1.0)).await.unwrap();
        assert_eq!(first.admission.decision.decision, DecisionKind::Allow);
        let before = counter(&a, "bursar_cluster_events_applied_total");
        let lines = "{\"id\":\"f2\",\"time\":\"2026-11-02T09:01:00Z\",\"type\":\"job.started\",\"job_id\":\"fj1\"}\n{\"id\":\"f3\",\"time\":\"2026-11-02T09:30:00Z\",\"type\":\"job.finished\",\"job_id\":\"fj1\",\"status\":\"succeeded\"}\n";
        let (items, _) = decode_body(lines.as_bytes(), 1 << 20, Origin::Producer);
        a.front.publish(items).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while counter(&a, "bursar_cluster_events_applied_total") < before + 2.0 {
            assert!(Instant::now() < deadline, "the job's events were not applied");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(counter(&a, "bursar_cluster_run_facts_sent_total"), 0.0, "no fact written to another partition");
        assert_eq!(counter(&a, "bursar_cluster_run_facts_skipped_total"), 1.0, "the finished run, not sent");
        a.shutdown().await;
    });
}
