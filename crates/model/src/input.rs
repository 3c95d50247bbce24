//! Everything that can reach the engine, as one type: [`Input`].
//!
//! Three things move the engine, and each has its own variant so no code has to guess which one it
//! holds from an id prefix or an extra field:
//!
//! - [`Input::Event`]: a producer's v1 event (jobs, samples, billing, approvals, assets, and a
//!   producer's own `clock.tick`). Policies see these, and only these.
//! - [`Input::WallTick`]: `bursar serve`'s wall clock. Time passes and timers due fire; no policy's
//!   `on = ["clock.tick"]` runs and it is not deduplicated. In the journal it is the line
//!   `{"id":"bursar-tick-<ms>","time":…,"type":"bursar.tick"}`; no producer may send that type.
//! - [`Input::Action`]: the record that an action a decision asked for was carried out
//!   (`action.executed`) or could not be (`action.failed`), written by an agent such as
//!   `bursar slurm enforce`. It is deduplicated and journaled (so `bursar audit` shows it) but changes
//!   no state and reaches no policy.
//! - [`Input::Run`]: in `serve --cluster`, the outcome of a run of one configuration that another
//!   partition saw finish (`run.recorded`), so trial-before-scale finds a trial made in any project.
//!   Only bursar writes it (a partition's owner, onto the other partitions' streams); producers may
//!   not send it. It updates the configuration's run history and nothing else.
//! - [`Input::Inventory`] (v1.x): what the pool has, per region, GPU type and queue (`pool.inventory`,
//!   [`Inventory`]), from a scheduler's agent or a producer with the `scheduler` power. It replaces the
//!   engine's latest figures for each row it names and reaches no policy; the estimator reads it.
//! - [`Input::Ledger`]: in `serve --cluster`, a change to the ledgers that span projects (user and
//!   tag budgets), sent by a project's partition to the partition that keeps those ledgers
//!   ([`LedgerOp`]). Only bursar writes it; no producer may send it, and it never reaches an audit log.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::event::{Event, Extra, FinishStatus};
use crate::gpus::Gpus;
use crate::time::Timestamp;

/// The wire type of bursar's own wall tick, accepted only from bursar's journal.
pub const WALL_TICK_TYPE: &str = "bursar.tick";

/// The id prefix of bursar's wall ticks; producers may not use it.
pub const WALL_TICK_PREFIX: &str = "bursar-tick-";

/// The wire type of a run fact ([`RunFact`]), accepted only from bursar itself.
pub const RUN_TYPE: &str = "run.recorded";

/// The wire type of an inventory ([`Inventory`]).
pub const INVENTORY_TYPE: &str = "pool.inventory";

/// The most rows one `pool.inventory` may carry.
pub const INVENTORY_ROWS: usize = 4096;

/// What one partition of the pool has: a region's GPU type in one queue (a Slurm partition, a Kueue
/// ClusterQueue), in GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CapacityRow {
    /// The region (a pool or cluster): `cn-north`.
    pub region: String,
    /// The GPU model: `H100`.
    pub gpu_type: String,
    /// The queue or partition; empty: the GPU type's capacity in the region, whatever the queue.
    #[serde(default)]
    pub queue: String,
    /// GPUs in service (not drained or down). Like every count here, a whole number or a share
    /// (`"30/7"`: thirty MIG slices of a seventh).
    #[serde(deserialize_with = "in_service")]
    pub in_service: Gpus,
    /// GPUs allocated to jobs now.
    #[serde(deserialize_with = "allocated")]
    pub allocated: Gpus,
    /// GPUs free now (in service and not allocated; a producer that knows better than
    /// in_service − allocated, fragmentation for one, says so here).
    #[serde(deserialize_with = "free")]
    pub free: Gpus,
    /// GPUs drained or down.
    #[serde(default, deserialize_with = "drained")]
    pub drained: Gpus,
    /// How the scheduler lets later jobs pass a blocked one: `easy` (default), `strict`,
    /// `best_effort` (`docs/estimate.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<String>,
}

/// Readers of [`CapacityRow`]'s counts whose errors name the field (serde's do not).
macro_rules! named_gpus {
    ($($name:ident),*) => {$(
        fn $name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Gpus, D::Error> {
            <Gpus as serde::Deserialize>::deserialize(d)
                .map_err(|e| serde::de::Error::custom(format!(concat!("`", stringify!($name), "`: {}"), e)))
        }
    )*};
}
named_gpus!(in_service, allocated, free, drained);

/// `pool.inventory` (v1.x): the pool's capacity per region, GPU type and queue at `time`:
/// `{"id":"inv-1","time":…,"type":"pool.inventory","source":"slurm:lab","capacity":[{"region":"cn-north",
/// "gpu_type":"H100","queue":"gpu","in_service":64,"allocated":48,"free":12,"drained":4}]}`.
/// Each row replaces the engine's row of the same (region, GPU type, queue); rows not named stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// Unique id.
    pub id: String,
    /// When the figures were read.
    pub time: Timestamp,
    /// Who read them (`slurm:lab`, `config`), for people.
    pub source: Option<String>,
    /// The rows.
    pub capacity: Vec<CapacityRow>,
}

impl Serialize for Inventory {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("time", &self.time.text())?;
        m.serialize_entry("type", INVENTORY_TYPE)?;
        if let Some(source) = &self.source {
            m.serialize_entry("source", source)?;
        }
        m.serialize_entry("capacity", &self.capacity)?;
        m.end()
    }
}

/// The wire type of a change to the shared ledgers ([`LedgerOp`]), accepted only from bursar itself.
pub const LEDGER_TYPE: &str = "ledger.op";

/// A change to the ledgers that span projects (user and tag budgets), as a project's partition sends
/// it to the partition that keeps them in `serve --cluster`:
/// `{"id":"…","time":…,"type":"ledger.op","op":{"kind":"start","job_id":"j1"}}`. `time` is the
/// event time of the change (when the job started, was released, was charged). The id is derived
/// from the input that caused the change, so a resend after a failover is the same op.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerOp {
    /// Unique id.
    pub id: String,
    /// Event time of the change.
    pub time: Timestamp,
    /// What changed.
    pub op: LedgerChange,
}

/// What a [`LedgerOp`] changes. Each mirrors what the project's partition did to its own copy of the
/// job's ledgers, with the same arithmetic on the same record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerChange {
    /// A submission: check the quotas that span projects and, if the decision it makes with the
    /// project's own verdict (`local`) is to admit, reserve.
    Admit {
        /// The project partition's clock when it decided (the day the reservation counts on).
        now: Timestamp,
        /// What the project's own policies decided before the spanning quotas (the combined
        /// verdict of its enforced policies).
        local: crate::DecisionKind,
        /// The job as the policies saw it (tags already trusted).
        job: Box<crate::JobSpec>,
    },
    /// An approval was granted: reserve now.
    Reserve {
        /// The job.
        job_id: String,
    },
    /// The job started (a run of it: the first, or one after a requeue).
    Start {
        /// The job.
        job_id: String,
        /// GPUs the scheduler allocated to the run, when it named them ([`crate::StartInfo::gpus`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpus: Option<Gpus>,
    },
    /// The job's run ended and it waits to run again (`job.requeued`): the run is settled.
    Requeue {
        /// The job.
        job_id: String,
    },
    /// A finished job runs again without an admission: it is reserved again.
    Reopen {
        /// The job.
        job_id: String,
    },
    /// Task `job_id` of array `parent` started for the first time: it is created from the array.
    Task {
        /// The array.
        parent: String,
        /// The task.
        job_id: String,
    },
    /// The job's GPUs were released (it finished, or was reclaimed), settling its reservation.
    Release {
        /// The job.
        job_id: String,
        /// By a reclaim rather than its own end.
        reclaimed: bool,
    },
    /// A reclaim the scheduler did not carry out: the job, still running, is held, reserved and
    /// charged again from the reclaim (`at`) on.
    Unreclaim {
        /// The job.
        job_id: String,
        /// When the reclaim released it.
        at: crate::Timestamp,
    },
    /// A billing charge for the job.
    Charge {
        /// The job.
        job_id: String,
        /// GPU-hours charged.
        gpu_hours: f64,
    },
    /// The job is gone: rejected, its approval expired, or forgotten after its retention.
    Drop {
        /// The job.
        job_id: String,
    },
}

impl LedgerChange {
    /// The job it is about.
    pub fn job_id(&self) -> &str {
        match self {
            LedgerChange::Admit { job, .. } => &job.id,
            LedgerChange::Reserve { job_id }
            | LedgerChange::Start { job_id, .. }
            | LedgerChange::Requeue { job_id }
            | LedgerChange::Reopen { job_id }
            | LedgerChange::Task { job_id, .. }
            | LedgerChange::Release { job_id, .. }
            | LedgerChange::Unreclaim { job_id, .. }
            | LedgerChange::Charge { job_id, .. }
            | LedgerChange::Drop { job_id } => job_id,
        }
    }
}

impl Serialize for LedgerOp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("time", &self.time.text())?;
        m.serialize_entry("type", LEDGER_TYPE)?;
        m.serialize_entry("op", &self.op)?;
        m.end()
    }
}

/// One input to the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A producer's v1 event.
    Event(Event),
    /// `serve`'s wall clock.
    WallTick(WallTick),
    /// An enforcement record.
    Action(Action),
    /// A run of a configuration that another partition saw finish (cluster mode).
    Run(RunFact),
    /// A change to the ledgers that span projects (cluster mode, the partition that keeps them).
    Ledger(LedgerOp),
    /// What the pool has (`pool.inventory`, v1.x).
    Inventory(Inventory),
}

/// The outcome of one run of a configuration, as the partition that saw the job finish recorded it:
/// `{"id":"run-<event id>","time":…,"type":"run.recorded","config":"<16 hex digits>","gpus":8,
/// "status":"succeeded"}`. `config` is the engine's hash of the job's configuration key (the trial
/// family's "same configuration"), `time` the job's finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFact {
    /// Unique id: `run-<the job.finished event's id>`, and `@p<n>` for the copy sent to partition n.
    pub id: String,
    /// When the run finished (event time of its `job.finished`).
    pub time: Timestamp,
    /// Hash of the configuration key.
    pub config: u64,
    /// GPUs of the run.
    pub gpus: Gpus,
    /// How it ended.
    pub status: FinishStatus,
}

impl RunFact {
    /// The copy of this fact for partition `p`, with its own id.
    pub fn for_partition(&self, p: u32) -> RunFact {
        RunFact { id: format!("{}@p{p}", self.id), ..self.clone() }
    }
}

impl Serialize for RunFact {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("time", &self.time.text())?;
        m.serialize_entry("type", RUN_TYPE)?;
        m.serialize_entry("config", &format!("{:016x}", self.config))?;
        m.serialize_entry("gpus", &self.gpus)?;
        m.serialize_entry("status", self.status.as_str())?;
        m.end()
    }
}

/// `serve`'s wall clock at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallTick {
    /// The wall-clock instant, as event time.
    pub time: Timestamp,
}

impl WallTick {
    /// The id decisions fired by this tick are attributed to: `bursar-tick-<millis>`.
    pub fn id(&self) -> String {
        let mut id = String::with_capacity(WALL_TICK_PREFIX.len() + 13);
        id.push_str(WALL_TICK_PREFIX);
        crate::time::push_int(&mut id, self.time.millis());
        id
    }
}

/// Whether an action was carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionOutcome {
    /// `action.executed`: done, or nothing needed doing (`action` is then `none`, `detail` says why).
    Executed,
    /// `action.failed`: tried and failed (`detail` has the error).
    Failed,
}

impl ActionOutcome {
    /// The wire type.
    pub fn type_name(self) -> &'static str {
        match self {
            ActionOutcome::Executed => "action.executed",
            ActionOutcome::Failed => "action.failed",
        }
    }
}

/// The record that the action a decision asked for was executed or failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// Unique id (an agent derives it from the decision: `enforce-<decision id>`).
    pub id: String,
    /// When the action ended (wall clock of the agent).
    pub time: Timestamp,
    /// Executed or failed.
    pub outcome: ActionOutcome,
    /// The decision carried out.
    pub decision_id: String,
    /// Its position in the decision stream, when the agent read it there.
    pub decision_seq: Option<u64>,
    /// The job.
    pub job_id: Option<String>,
    /// What was done: `scancel`, `scontrol release`, … or `none`.
    pub action: String,
    /// A sentence: what happened, or the error.
    pub detail: Option<String>,
    /// How many times it was tried.
    pub attempts: Option<u32>,
    /// Fields the agent added (`slurm_job_id`, `slurm_cluster`, …, and `decision`: the kind of the
    /// decision carried out), kept verbatim.
    pub extra: Extra,
}

impl Action {
    /// The kind of the decision carried out (`reclaim`, `allow`, …), when the agent said it (its
    /// `decision` field: `bursar-agent` writes it on every record).
    pub fn decision_kind(&self) -> Option<String> {
        let (_, v) = self.extra.iter().find(|(k, _)| k == "decision")?;
        serde_json::from_str::<String>(v.get()).ok()
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("time", &self.time.text())?;
        m.serialize_entry("type", self.outcome.type_name())?;
        m.serialize_entry("decision_id", &self.decision_id)?;
        if let Some(v) = &self.decision_seq {
            m.serialize_entry("decision_seq", v)?;
        }
        if let Some(v) = &self.job_id {
            m.serialize_entry("job_id", v)?;
        }
        m.serialize_entry("action", &self.action)?;
        if let Some(v) = &self.detail {
            m.serialize_entry("detail", v)?;
        }
        if let Some(v) = &self.attempts {
            m.serialize_entry("attempts", v)?;
        }
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for WallTick {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("id", &self.id())?;
        m.serialize_entry("time", &self.time.text())?;
        m.serialize_entry("type", WALL_TICK_TYPE)?;
        m.end()
    }
}

impl Serialize for Input {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Input::Event(e) => e.serialize(s),
            Input::WallTick(t) => t.serialize(s),
            Input::Action(a) => a.serialize(s),
            Input::Run(r) => r.serialize(s),
            Input::Ledger(l) => l.serialize(s),
            Input::Inventory(i) => i.serialize(s),
        }
    }
}

impl Input {
    /// The input's id (a wall tick's is derived from its time).
    pub fn id(&self) -> Cow<'_, str> {
        match self {
            Input::Event(e) => Cow::Borrowed(&e.id),
            Input::WallTick(t) => Cow::Owned(t.id()),
            Input::Action(a) => Cow::Borrowed(&a.id),
            Input::Run(r) => Cow::Borrowed(&r.id),
            Input::Ledger(l) => Cow::Borrowed(&l.id),
            Input::Inventory(i) => Cow::Borrowed(&i.id),
        }
    }

    /// Its time.
    pub fn time(&self) -> Timestamp {
        match self {
            Input::Event(e) => e.time,
            Input::WallTick(t) => t.time,
            Input::Action(a) => a.time,
            Input::Run(r) => r.time,
            Input::Ledger(l) => l.time,
            Input::Inventory(i) => i.time,
        }
    }

    /// The wire type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Input::Event(e) => e.kind.type_name(),
            Input::WallTick(_) => WALL_TICK_TYPE,
            Input::Action(a) => a.outcome.type_name(),
            Input::Run(_) => RUN_TYPE,
            Input::Ledger(_) => LEDGER_TYPE,
            Input::Inventory(_) => INVENTORY_TYPE,
        }
    }

    /// The job it is about, if any.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Input::Event(e) => e.kind.job_id(),
            Input::WallTick(_) | Input::Run(_) | Input::Inventory(_) => None,
            Input::Action(a) => a.job_id.as_deref(),
            Input::Ledger(l) => Some(l.op.job_id()),
        }
    }

    /// The canonical JSON line (without the newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl From<Event> for Input {
    fn from(e: Event) -> Input {
        Input::Event(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, decode_event, decode_input};

    #[test]
    fn every_input_round_trips_through_its_canonical_line() {
        let lines = [
            r#"{"id":"enforce-e5/0","time":"2026-11-02T09:05:00Z","type":"action.executed","decision_id":"e5/0","decision_seq":9,"job_id":"j1","action":"scancel","detail":"cancelled Slurm job 17","attempts":1,"slurm_job_id":"17"}"#,
            r#"{"id":"enforce-e6/0","time":"2026-11-02T09:05:00Z","type":"action.failed","decision_id":"e6/0","action":"scontrol release","detail":"gave up after 3 attempts"}"#,
            r#"{"id":"bursar-tick-1793610000000","time":"2026-11-02T09:00:00Z","type":"bursar.tick"}"#,
            r#"{"id":"t1","time":"2026-11-02T09:00:00Z","type":"clock.tick"}"#,
        ];
        for l in lines {
            let i = decode_input(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert_eq!(i.to_json(), l);
        }
        let Input::Action(a) = decode_input(lines[0]).unwrap() else { panic!("not an action") };
        assert_eq!((a.outcome, a.decision_seq, a.job_id.as_deref()), (ActionOutcome::Executed, Some(9), Some("j1")));
        assert_eq!(a.extra[0].0, "slurm_job_id");
        let Input::WallTick(t) = decode_input(lines[2]).unwrap() else { panic!("not a wall tick") };
        assert_eq!(t.id(), "bursar-tick-1793610000000");
    }

    #[test]
    fn an_inventory_round_trips_and_its_rows_are_checked() {
        let line = r#"{"id":"inv-1","time":"2026-11-02T09:00:00Z","type":"pool.inventory","source":"slurm:lab","capacity":[{"region":"cn-north","gpu_type":"H100","queue":"gpu","in_service":64,"allocated":48,"free":12,"drained":4},{"region":"cn-east","gpu_type":"H100","queue":"","in_service":8,"allocated":0,"free":8,"drained":0,"backfill":"strict"}]}"#;
        let input = decode_input(line).unwrap();
        assert_eq!(input.to_json(), line);
        let Input::Inventory(inv) = input else { panic!("not an inventory") };
        assert_eq!(
            (inv.capacity.len(), inv.capacity[0].free, inv.source.as_deref()),
            (2, Gpus::whole(12), Some("slurm:lab"))
        );
        // queue and drained may be left out.
        let short = r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r","gpu_type":"A100","in_service":8,"allocated":2,"free":6}]}"#;
        let Input::Inventory(inv) = decode_input(short).unwrap() else { panic!("not an inventory") };
        assert_eq!((inv.capacity[0].queue.as_str(), inv.capacity[0].drained), ("", Gpus::ZERO));
        // MIG slices are counted as their share (v1.x), and written back as they came.
        let mig = r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r","gpu_type":"1G.10GB","queue":"mig","in_service":1,"allocated":"2/7","free":"5/7","drained":"10/7"}]}"#;
        let input = decode_input(mig).unwrap();
        assert_eq!(input.to_json(), mig);
        let Input::Inventory(inv) = input else { panic!("not an inventory") };
        assert_eq!(inv.capacity[0].free, Gpus::fraction(5, 7).unwrap());
        for (bad, says) in [
            (r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory"}"#, "capacity"),
            (
                r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r","gpu_type":"A","in_service":-1,"allocated":0,"free":0}]}"#,
                "`capacity`: `in_service`: `-1` is not a GPU count",
            ),
            (
                r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r","gpu_type":"A","in_service":2000000,"allocated":0,"free":0}]}"#,
                "`in_service`: `2000000` GPUs is above the largest value",
            ),
            (
                r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r","gpu_type":"A","in_service":1,"allocated":0,"free":"1/11"}]}"#,
                "`free`: `1/11` is not a whole number of 840ths",
            ),
            (
                r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r","gpu_type":"A","in_service":1,"allocated":0,"free":0,"backfill":"lifo"}]}"#,
                "backfill",
            ),
        ] {
            let err = decode_input(bad).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let bidi = r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"pool.inventory","capacity":[{"region":"r\u202e","gpu_type":"A","in_service":1,"allocated":0,"free":1}]}"#;
        let input = decode_input(bidi).unwrap();
        assert!(crate::names::check(&input).is_err(), "names in rows follow the name rules");
    }

    #[test]
    fn a_ledger_op_round_trips_through_its_canonical_line() {
        let job = crate::event::decode_event(
            r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"ada","gpus":8,"requested_hours":2.0,"tags":{"team":"search"}}}"#,
        )
        .unwrap();
        let EventKind::JobSubmitted(spec) = job.kind else { panic!("not a submission") };
        for op in [
            LedgerChange::Admit { now: job.time, local: crate::DecisionKind::Allow, job: spec },
            LedgerChange::Release { job_id: "j1".into(), reclaimed: true },
            LedgerChange::Charge { job_id: "j1".into(), gpu_hours: 3.5 },
        ] {
            let input = Input::Ledger(LedgerOp { id: "l:e1".into(), time: job.time, op });
            let line = input.to_json();
            assert!(line.contains(r#""type":"ledger.op""#), "{line}");
            assert_eq!(decode_input(&line).unwrap(), input, "{line}");
        }
    }

    #[test]
    fn an_action_or_a_wall_tick_is_not_an_event_policies_see() {
        let action =
            r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"action.executed","decision_id":"d","action":"none"}"#;
        let err = decode_event(action).unwrap_err().to_string();
        assert!(err.contains("`action.executed` is not an event type policies see"), "{err}");
        let missing = r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"action.failed","action":"scancel"}"#;
        assert!(decode_input(missing).unwrap_err().to_string().contains("missing field `decision_id`"));
        let Input::Event(e) = decode_input(r#"{"id":"x","time":"2026-11-02T09:00:00Z","type":"clock.tick"}"#).unwrap()
        else {
            panic!("a producer's tick is an event")
        };
        assert_eq!(e.kind, EventKind::ClockTick);
    }
}
