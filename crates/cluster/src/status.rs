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
    /// Finished runs not sent to the other partitions because no policy of the set reads run history.
    pub run_facts_skipped: AtomicU64,
    /// Admissions answered by this instance's owners.
    pub admissions_answered: AtomicU64,
    /// Admissions this front end forwarded and got a decision for.
    pub admissions_decided: AtomicU64,
    /// Admissions answered 503 because no owner answered in time.
    pub admissions_unowned: AtomicU64,
    /// Snapshots written.
    pub snapshots: AtomicU64,
    /// Partitions this instance handed over to a named receiver.
    pub handovers_given: AtomicU64,
    /// Journal flushes (group commits) of this instance's owners, and the entries and microseconds
    /// they took: where an admission's time goes.
    pub flushes: AtomicU64,
    /// Entries journaled.
    pub flushed_entries: AtomicU64,
    /// Journal messages this instance's writer published (each holding the commits of several
    /// partitions), and the entries they held.
    pub journal_messages: AtomicU64,
    /// Entries in those messages.
    pub journal_message_entries: AtomicU64,
    /// Microseconds in journal publishes (waiting for the replicated ack).
    pub flush_micros: AtomicU64,
    /// Microseconds applying batches (engine and session).
    pub apply_micros: AtomicU64,
    /// Microseconds this front end waited for owners' answers to admissions.
    pub ask_micros: AtomicU64,
    /// Admissions this front end handed straight to its own instance's owner threads.
    pub admissions_local: AtomicU64,
    /// Admissions this front end forwarded to the instance owning their partition, in batches.
    pub admissions_forwarded: AtomicU64,
    /// Lookups of a job's partition that had to ask the owners ([`crate::jobs`]).
    pub jobs_asked: AtomicU64,
    /// Ops this instance's project partitions sent to the ledger partition, the exchanges they went
    /// in, and the microseconds those took.
    pub ledger_ops: AtomicU64,
    /// Exchanges with the ledger partition.
    pub ledger_exchanges: AtomicU64,
    /// Microseconds waiting for the ledger partition.
    pub ledger_micros: AtomicU64,
    /// Ops the ledger partition (when owned here) applied.
    pub ledger_applied: AtomicU64,
    /// Spanning admissions decided otherwise here than by the ledger partition (sets out of step).
    pub ledger_mismatches: AtomicU64,
    /// Partitions handed over to this instance.
    pub handovers_received: AtomicU64,
    /// Partitions this instance took because their lease expired (an owner that died or stalled).
    pub expired_takeovers: AtomicU64,
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
    gaps: Mutex<Gaps>,
}

/// Milliseconds of the handovers' gaps: on the giving side from the release asked to the lease
/// naming the receiver; on the receiving side from seeing that lease to answering.
#[derive(Debug, Default, Clone, Copy)]
struct Gaps {
    given_sum: f64,
    given_max: f64,
    received_sum: f64,
    received_max: f64,
    received_last: f64,
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
            gaps: Mutex::new(Gaps::default()),
        }
    }

    /// A handover this instance gave took `ms` from the release asked to the receiver named.
    pub fn handover_given(&self, ms: f64) {
        if let Ok(mut g) = self.gaps.lock() {
            g.given_sum += ms;
            g.given_max = g.given_max.max(ms);
        }
    }

    /// A partition handed over to this instance was answering `ms` after the lease naming it was seen.
    pub fn handover_received(&self, ms: f64) {
        if let Ok(mut g) = self.gaps.lock() {
            g.received_sum += ms;
            g.received_max = g.received_max.max(ms);
            g.received_last = ms;
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

    /// The instance holding partition `p`'s lease, as this instance last saw it.
    pub fn owner_of(&self, p: u32) -> Option<String> {
        self.owners.lock().ok()?.get(usize::try_from(p).ok()?)?.clone()
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
            "bursar_cluster_run_facts_skipped_total",
            "counter",
            "Finished runs not sent to the other partitions: no policy of the set reads run history.",
            load(&c.run_facts_skipped),
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
        put(
            "bursar_cluster_handovers_given_total",
            "counter",
            "Partitions this instance handed over to a named receiver (no lease wait).",
            load(&c.handovers_given),
        );
        put(
            "bursar_cluster_handovers_received_total",
            "counter",
            "Partitions handed over to this instance.",
            load(&c.handovers_received),
        );
        put(
            "bursar_cluster_expired_takeovers_total",
            "counter",
            "Partitions taken because their lease expired (the owner died or stalled).",
            load(&c.expired_takeovers),
        );
        for (name, help, v) in [
            ("bursar_cluster_journal_flushes_total", "Journal group commits of this instance's owners.", &c.flushes),
            ("bursar_cluster_journal_entries_total", "Entries those commits journaled.", &c.flushed_entries),
            (
                "bursar_cluster_journal_messages_total",
                "Journal messages this instance's writer published, each holding the commits of every partition ready at the time.",
                &c.journal_messages,
            ),
            (
                "bursar_cluster_journal_message_entries_total",
                "Entries those journal messages held.",
                &c.journal_message_entries,
            ),
            (
                "bursar_cluster_admissions_local_total",
                "Admissions this front end handed straight to an owner thread of this instance (no NATS request).",
                &c.admissions_local,
            ),
            (
                "bursar_cluster_admissions_forwarded_total",
                "Admissions this front end forwarded to the instance owning their partition, with the others waiting for it (one request each batch).",
                &c.admissions_forwarded,
            ),
            (
                "bursar_cluster_job_lookups_asked_total",
                "Look-ups of a job's partition that neither this instance's index, the bucket nor the journal answered, so the owners were asked.",
                &c.jobs_asked,
            ),
            (
                "bursar_cluster_ledger_ops_total",
                "Ops (admissions and changes to jobs admitted through it) this instance's project partitions sent to the ledger partition.",
                &c.ledger_ops,
            ),
            (
                "bursar_cluster_ledger_exchanges_total",
                "Round trips to the ledger partition (ops are sent in order, several per trip).",
                &c.ledger_exchanges,
            ),
            (
                "bursar_cluster_ledger_applied_total",
                "Ops the ledger partition applied while this instance owned it.",
                &c.ledger_applied,
            ),
            (
                "bursar_cluster_ledger_mismatches_total",
                "Admissions a project partition decided otherwise than the ledger partition combined them (policy sets out of step); should stay 0.",
                &c.ledger_mismatches,
            ),
        ] {
            put(name, "counter", help, load(v));
        }
        for (name, help, v) in [
            (
                "bursar_cluster_journal_flush_seconds_total",
                "Seconds owners waited for replicated journal publishes.",
                &c.flush_micros,
            ),
            ("bursar_cluster_apply_seconds_total", "Seconds owners spent applying batches.", &c.apply_micros),
            (
                "bursar_cluster_admit_ask_seconds_total",
                "Seconds this front end waited for owners' answers to admissions.",
                &c.ask_micros,
            ),
            (
                "bursar_cluster_ledger_wait_seconds_total",
                "Seconds this instance's project partitions waited for the ledger partition.",
                &c.ledger_micros,
            ),
        ] {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n", load(v) as f64 / 1e6));
        }
        let g = self.gaps.lock().map(|g| *g).unwrap_or_default();
        let mut f = |name: &str, kind: &str, help: &str, v: f64| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n", v / 1e3));
        };
        f(
            "bursar_cluster_handover_give_seconds_sum",
            "counter",
            "Seconds from a handover asked to the lease naming its receiver, summed over handovers given.",
            g.given_sum,
        );
        f("bursar_cluster_handover_give_seconds_max", "gauge", "The longest such handover.", g.given_max);
        f(
            "bursar_cluster_handover_gap_seconds_sum",
            "counter",
            "Seconds from seeing a lease handed to this instance to answering for the partition, summed.",
            g.received_sum,
        );
        f("bursar_cluster_handover_gap_seconds_max", "gauge", "The longest such gap.", g.received_max);
        f("bursar_cluster_handover_gap_seconds_last", "gauge", "The last such gap.", g.received_last);
        s
    }
}
