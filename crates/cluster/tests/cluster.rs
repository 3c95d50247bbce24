//! Two in-process cluster instances against a real 3-node NATS JetStream cluster: admissions reach
//! the owner from either instance, a resent submission gets the first decision, JetStream's and the
//! engine's de-duplication agree, a handover keeps the quota state, and a paused owner's writes are
//! refused once a new owner took over.

#![expect(clippy::unwrap_used, reason = "a test")]

use std::sync::Arc;
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

fn config(nats: &NatsCluster, dir: &TempDir, name: &str) -> ClusterConfig {
    let mut c = ClusterConfig::new(nats.url(), name, dir.path().join(format!("{name}.db")));
    c.partitions = 4;
    c.lease_ttl = Duration::from_millis(1200);
    c.snapshot_every = Duration::from_millis(500);
    c.durable = false;
    c
}

async fn wait_live(clusters: &[&Cluster], partitions: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
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

#[test]
fn admissions_from_any_instance_survive_a_handover() {
    if NatsCluster::binary().is_none() {
        eprintln!("skipped: no nats-server (scripts/setup.sh installs it)");
        return;
    }
    let nats = NatsCluster::start(3).unwrap();
    let dir = TempDir::new("cluster-inproc").unwrap();
    let set = policies(&dir);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (_tx, rx) = watch::channel(set.clone());
        let a = Cluster::start(config(&nats, &dir, "a"), rx.clone()).await.unwrap();
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
        let b = Cluster::start(config(&nats, &dir, "b"), rx.clone()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while b.status.live().len() != 2 || a.status.live().len() != 2 {
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
