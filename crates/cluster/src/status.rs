//! What an instance reports about itself: the partitions it owns and counters, shared by the owner
//! threads, the lease manager, the projection and the HTTP front end (`/v1/cluster`, `/metrics`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bursar_model::api::{ClusterView, OwnedPartition};

/// Counters since start.
#[derive(Debug, Default)]
pub struct Counters {
    /// Partitions this instance took over and brought live.
    pub takeovers: AtomicU64,
    /// Writes the streams refused because another owner had taken over (fencing at work).
    pub fenced: AtomicU64,
    /// Partitions handed over or stepped down.
    pub stepped_down: AtomicU64,
    /// Events applied by this instance's owners.
    pub events_applied: AtomicU64,
    /// Events published by this instance's front end.
    pub events_published: AtomicU64,
    /// Events the stream found duplicates (`Nats-Msg-Id`).
    pub events_duplicate: AtomicU64,
    /// Run facts (`run.recorded`) this instance's owners sent to other partitions.
    pub run_facts_sent: AtomicU64,
    /// Admissions answered by this instance's owners.
    pub admissions_answered: AtomicU64,
    /// Admissions this front end forwarded and got a decision for.
    pub admissions_decided: AtomicU64,
    /// Admissions answered 503 because no owner answered in time.
    pub admissions_unowned: AtomicU64,
    /// Snapshots written.
    pub snapshots: AtomicU64,
    /// Journal messages projected into the audit log.
    pub projected: AtomicU64,
    /// Stream sequence of the last journal message projected.
    pub projected_seq: AtomicU64,
}

/// The state of one owned partition.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedState {
    /// Fencing epoch.
    pub epoch: u64,
    /// Answering.
    pub live: bool,
    /// Takeover time, once live.
    pub takeover_ms: Option<f64>,
    /// Entries replayed.
    pub replayed: u64,
}

impl OwnedState {
    /// Restoring.
    pub fn restoring(epoch: u64) -> OwnedState {
        OwnedState { epoch, live: false, takeover_ms: None, replayed: 0 }
    }

    /// Live after `ms`.
    pub fn live(epoch: u64, ms: f64, replayed: u64) -> OwnedState {
        OwnedState { epoch, live: true, takeover_ms: Some(ms), replayed }
    }
}

/// Shared status.
#[derive(Debug)]
pub struct Status {
    /// This instance.
    pub instance: String,
    /// Partition count.
    pub partitions: u32,
    /// Counters.
    pub counters: Counters,
    owned: Mutex<BTreeMap<u32, OwnedState>>,
    owners: Mutex<Vec<Option<String>>>,
}

impl Status {
    /// Nothing owned yet.
    pub fn new(instance: &str, partitions: u32) -> Status {
        Status {
            instance: instance.to_owned(),
            partitions,
            counters: Counters::default(),
            owned: Mutex::new(BTreeMap::new()),
            owners: Mutex::new(vec![None; usize::try_from(partitions).unwrap_or(0)]),
        }
    }

    /// Records partition `p`'s state.
    pub fn set_owned(&self, p: u32, s: OwnedState) {
        if let Ok(mut m) = self.owned.lock() {
            m.insert(p, s);
        }
    }

    /// `p` is no longer owned here.
    pub fn remove_owned(&self, p: u32) {
        if let Ok(mut m) = self.owned.lock() {
            m.remove(&p);
        }
        self.counters.stepped_down.fetch_add(1, Ordering::Relaxed);
    }

    /// The partitions owned and live.
    pub fn live(&self) -> Vec<u32> {
        self.owned.lock().map(|m| m.iter().filter(|(_, s)| s.live).map(|(p, _)| *p).collect()).unwrap_or_default()
    }

    /// Records who holds each lease.
    pub fn set_owners(&self, owners: Vec<Option<String>>) {
        if let Ok(mut o) = self.owners.lock() {
            *o = owners;
        }
    }

    /// The view of `GET /v1/cluster`.
    pub fn view(&self) -> ClusterView {
        let owned = self
            .owned
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(p, s)| OwnedPartition {
                        partition: *p,
                        epoch: s.epoch,
                        state: if s.live { "live" } else { "restoring" }.to_owned(),
                        takeover_ms: s.takeover_ms,
                        replayed: s.replayed,
                    })
                    .collect()
            })
            .unwrap_or_default();
        ClusterView {
            instance: self.instance.clone(),
            partitions: self.partitions,
            owned,
            owners: self.owners.lock().map(|o| o.clone()).unwrap_or_default(),
            projected_seq: self.counters.projected_seq.load(Ordering::Relaxed),
        }
    }

    /// The Prometheus text of the counters.
    pub fn render(&self) -> String {
        let c = &self.counters;
        let live = self.live().len();
        let owned = self.owned.lock().map(|m| m.len()).unwrap_or(0);
        let mut s = String::new();
        let mut put = |name: &str, kind: &str, help: &str, v: u64| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
        };
        put("bursar_cluster_partitions", "gauge", "Partitions of the cluster.", u64::from(self.partitions));
        put("bursar_cluster_owned_partitions", "gauge", "Partitions this instance holds the lease of.", owned as u64);
        put("bursar_cluster_live_partitions", "gauge", "Partitions this instance answers for.", live as u64);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        put("bursar_cluster_takeovers_total", "counter", "Partitions taken over and brought live.", load(&c.takeovers));
        put(
            "bursar_cluster_fenced_writes_total",
            "counter",
            "Writes refused because a newer owner took over.",
            load(&c.fenced),
        );
        put("bursar_cluster_step_downs_total", "counter", "Partitions handed over or given up.", load(&c.stepped_down));
        put(
            "bursar_cluster_events_applied_total",
            "counter",
            "Events applied by this instance's owners.",
            load(&c.events_applied),
        );
        put(
            "bursar_cluster_events_published_total",
            "counter",
            "Events this front end published.",
            load(&c.events_published),
        );
        put(
            "bursar_cluster_events_duplicate_total",
            "counter",
            "Events the stream dropped as duplicates.",
            load(&c.events_duplicate),
        );
        put(
            "bursar_cluster_run_facts_sent_total",
            "counter",
            "Run facts (a finished run, for trial-before-scale) this instance's owners sent to the other partitions.",
            load(&c.run_facts_sent),
        );
        put(
            "bursar_cluster_admissions_answered_total",
            "counter",
            "Admissions this instance's owners answered.",
            load(&c.admissions_answered),
        );
        put(
            "bursar_cluster_admissions_decided_total",
            "counter",
            "Admissions this front end forwarded and got a decision for.",
            load(&c.admissions_decided),
        );
        put(
            "bursar_cluster_admissions_unowned_total",
            "counter",
            "Admissions answered 503: no owner answered in time.",
            load(&c.admissions_unowned),
        );
        put("bursar_cluster_snapshots_total", "counter", "Snapshots written.", load(&c.snapshots));
        put(
            "bursar_cluster_projected_total",
            "counter",
            "Journal messages projected into the audit log.",
            load(&c.projected),
        );
        put(
            "bursar_cluster_projected_seq",
            "gauge",
            "Stream sequence of the last journal message projected.",
            load(&c.projected_seq),
        );
        s
    }
}
