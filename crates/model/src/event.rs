//! Events, wire format v1: one JSON object per line with `id`, `time` (RFC 3339) and `type`.
//!
//! The decoder is written by hand over serde's visitor API rather than derived: it reads each object in
//! one pass whatever the order of its keys (a producer may put `type` last), keeps every field it does
//! not know as raw JSON (so nothing a producer adds is lost), and checks ranges (`gpu_util` is a fraction)
//! with messages that say what was expected.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::gpus::Gpus;
use crate::input::{Action, ActionOutcome, Input, WallTick};
use crate::time::Timestamp;

/// Fields a producer added that v1 does not define, kept verbatim in arrival order.
pub type Extra = Vec<(String, RawJson)>;

/// A JSON value kept as the exact text the producer sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(pub Box<RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// One event from the scheduler, the billing system or an approver.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Unique id; an event whose id was already seen is ignored.
    pub id: String,
    /// When it happened; drives every window and timer.
    pub time: Timestamp,
    /// What happened.
    pub kind: EventKind,
    /// Top-level fields v1 does not define.
    pub extra: Extra,
}

/// The v1 event types and their payloads.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// `job.submitted`: a job asks for GPUs; it always gets exactly one admission decision.
    JobSubmitted(Box<JobSpec>),
    /// `job.started`: the scheduler placed the job, for its first run or a later one (after a
    /// `job.requeued`).
    JobStarted {
        /// The job.
        job_id: String,
        /// What the scheduler allocated to this run and who let it start ([`StartInfo`]); all absent
        /// for a plain v1 start.
        info: StartInfo,
    },
    /// `job.sample`: a utilisation sample.
    JobSample(Sample),
    /// `job.finished`.
    JobFinished {
        /// The job.
        job_id: String,
        /// How it ended.
        status: FinishStatus,
    },
    /// `job.keepalive`: the owner confirms an idle job should continue.
    JobKeepalive {
        /// The job.
        job_id: String,
        /// Who confirmed.
        by: Option<String>,
    },
    /// `billing.charge`: the billing system charged a project.
    BillingCharge(BillingCharge),
    /// `approval.granted`.
    ApprovalGranted {
        /// The job.
        job_id: String,
        /// The approver.
        by: Option<String>,
    },
    /// `approval.rejected`.
    ApprovalRejected {
        /// The job.
        job_id: String,
        /// The approver.
        by: Option<String>,
    },
    /// `asset.registered`: a dataset or image now exists and can be reused.
    AssetRegistered {
        /// The owning project.
        project: String,
        /// The asset.
        asset: Asset,
    },
    /// `clock.tick`: time passes; timers due by now fire.
    ClockTick,
    /// `job.queued` (v1.x): the scheduler created the admitted job and holds it in its queue. It
    /// confirms the admission (see [`JobSpec::confirm_within_s`]) and changes nothing else.
    JobQueued {
        /// The job.
        job_id: String,
    },
    /// `job.requeued` (v1.x): the job's current run ended at the event's time and the job waits to
    /// run again (a requeue, a preemption or node failure that requeues it, an eviction). The run is
    /// settled; the job keeps its admission. Of a job that had finished: the scheduler is running it
    /// again without an admission (a rerun).
    JobRequeued {
        /// The job.
        job_id: String,
    },
}

/// The optional part of a `job.started` (v1.x): what the scheduler actually allocated to this run and
/// who let it start. Each field is absent in a plain v1 start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartInfo {
    /// GPUs the scheduler allocated to this run, in total over its nodes or pods. When it differs
    /// from what the admission reserved, the reservation and the GPU counts follow the allocation.
    pub gpus: Option<Gpus>,
    /// For a task of an array: the array's job id. The task (this event's `job_id`) is created from
    /// the array's admission on its first start.
    pub parent: Option<String>,
    /// The job waited for approval and this person released it in the scheduler, outside bursar.
    pub released_by: Option<String>,
}

impl StartInfo {
    /// True when no field is set (a plain v1 start).
    pub fn is_empty(&self) -> bool {
        self.gpus.is_none() && self.parent.is_none() && self.released_by.is_none()
    }
}

impl EventKind {
    /// The wire name of the type, e.g. `job.submitted`.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::JobSubmitted(_) => "job.submitted",
            EventKind::JobStarted { .. } => "job.started",
            EventKind::JobSample(_) => "job.sample",
            EventKind::JobFinished { .. } => "job.finished",
            EventKind::JobKeepalive { .. } => "job.keepalive",
            EventKind::BillingCharge(_) => "billing.charge",
            EventKind::ApprovalGranted { .. } => "approval.granted",
            EventKind::ApprovalRejected { .. } => "approval.rejected",
            EventKind::AssetRegistered { .. } => "asset.registered",
            EventKind::ClockTick => "clock.tick",
            EventKind::JobQueued { .. } => "job.queued",
            EventKind::JobRequeued { .. } => "job.requeued",
        }
    }

    /// The job the event is about, if any.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            EventKind::JobSubmitted(j) => Some(&j.id),
            EventKind::JobStarted { job_id, .. }
            | EventKind::JobQueued { job_id }
            | EventKind::JobRequeued { job_id }
            | EventKind::JobSample(Sample { job_id, .. })
            | EventKind::JobFinished { job_id, .. }
            | EventKind::JobKeepalive { job_id, .. }
            | EventKind::ApprovalGranted { job_id, .. }
            | EventKind::ApprovalRejected { job_id, .. } => Some(job_id),
            EventKind::BillingCharge(c) => c.job_id.as_deref(),
            EventKind::AssetRegistered { .. } | EventKind::ClockTick => None,
        }
    }
}

/// Every event type name: v1's, in the order of the brief, then the v1.x additions.
pub const EVENT_TYPES: [&str; 12] = [
    "job.submitted",
    "job.started",
    "job.sample",
    "job.finished",
    "job.keepalive",
    "billing.charge",
    "approval.granted",
    "approval.rejected",
    "asset.registered",
    "clock.tick",
    "job.queued",
    "job.requeued",
];

/// A `job.sample`: how busy a running job's GPUs were at `time`.
///
/// `gpu_util` is the one field every producer sends; the others are what a utilisation source that
/// sees each GPU (the Prometheus/DCGM source) or the job itself can add. All are optional on the wire.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    /// The job.
    pub job_id: String,
    /// GPU utilisation, 0.0 to 1.0 (for a job on several GPUs: the mean over them).
    pub gpu_util: f64,
    /// GPU memory utilisation, 0.0 to 1.0, if known.
    pub mem_util: Option<f64>,
    /// The busiest of the job's GPUs, 0.0 to 1.0, when the sample covers several.
    pub gpu_util_max: Option<f64>,
    /// Frame-buffer memory in use, MiB summed over the job's GPUs (DCGM's `DCGM_FI_DEV_FB_USED`), so
    /// "memory held, engine idle" is visible.
    pub fb_used_mib: Option<f64>,
    /// How many GPUs the sample covers.
    pub gpus: Option<u32>,
    /// The job's own rate of progress in `unit` (e.g. `5120.0` with `"unit": "tokens/s"`).
    pub throughput: Option<f64>,
    /// A cumulative progress counter in `unit` (e.g. tokens processed so far); the rate is the
    /// difference between two samples over their time apart.
    pub progress: Option<f64>,
    /// The unit of `throughput` (`tokens/s`, `samples/s`, `steps/s`) or of `progress` (`tokens`, …).
    pub unit: Option<String>,
    /// v1.x: DCGM's SM activity (`DCGM_FI_PROF_SM_ACTIVE`), 0.0 to 1.0: the share of time the GPU's
    /// streaming multiprocessors had work. A truer measure of use than `gpu_util` (which counts a
    /// kernel on one SM as busy); the use-weighted effective hours take it when the samples carry it.
    pub sm_active: Option<f64>,
    /// v1.x: the share of the interval, 0.0 to 1.0, the job's own loop waited for input (its data
    /// loader's or I/O counters). Low-use hours are counted as waiting for data only from this.
    pub input_wait: Option<f64>,
}

/// What a submitted job asks for. Fields other than `id` and `project` may be absent; a policy that
/// needs an absent field says so in its decision rather than guessing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobSpec {
    /// Job id, unique in the scheduler.
    pub id: String,
    /// Project (cost centre) the GPU-hours are charged to.
    pub project: String,
    /// Submitting user.
    pub user: String,
    /// Scheduler queue or partition.
    pub queue: Option<String>,
    /// GPUs requested in total (per task of an array), exact to a MIG slice: `2/7` is two
    /// `1g.10gb` slices of an A100.
    pub gpus: Gpus,
    /// GPU model, e.g. `H200`.
    pub gpu_type: Option<String>,
    /// Memory of one GPU in GB.
    pub gpu_mem_gb: Option<f64>,
    /// Nodes the job spans.
    pub nodes: u32,
    /// Wall-clock hours requested.
    pub requested_hours: f64,
    /// Pipeline stage: `data_prep`, `pretrain`, `finetune`, `eval`, `image_build`, …
    pub stage: Option<String>,
    /// Model size in billions of parameters.
    pub model_params_b: Option<f64>,
    /// Container image.
    pub image: Option<String>,
    /// Input dataset id.
    pub dataset: Option<String>,
    /// Digest of the job's script.
    pub script_hash: Option<String>,
    /// What the submitter declares ready.
    pub ready: Ready,
    /// Whether the work may run later (evaluation, preprocessing, format conversion).
    pub deferrable: bool,
    /// Free-form labels, e.g. `team = "search"`; sorted by key.
    pub tags: Vec<(String, String)>,
    /// Extension (v1.x): mixed precision enabled.
    pub mixed_precision: Option<bool>,
    /// Extension (v1.x): per-GPU batch size.
    pub batch_size: Option<u32>,
    /// Extension (v1.x): data loader worker processes (0 = loading in the training process).
    pub dataloader_workers: Option<u32>,
    /// Extension (v1.x): interconnect between nodes, e.g. `infiniband`, `ethernet`.
    pub interconnect: Option<String>,
    /// Extension (v1.x): region the job asks for.
    pub region: Option<String>,
    /// Extension (v1.x): a name for the job's configuration, for trial-before-scale; when absent the
    /// configuration is image + dataset + script + model size.
    pub config: Option<String>,
    /// Extension (v1.x): the job is this admitted job moved (a Slurm partition change the hook admits
    /// again under a new id): while the new admission is evaluated and until the scheduler confirms or
    /// drops it, the old one holds and reserves nothing, so the move counts once.
    pub replaces: Option<String>,
    /// Extension (v1.x): the job is an array of tasks, each asking for `gpus` for `requested_hours`.
    pub array: Option<ArraySpec>,
    /// Extension (v1.x): the scheduler confirms within this many seconds of the admission that it
    /// created the job (`job.queued` or `job.started`); an admission it never confirms is released.
    pub confirm_within_s: Option<u32>,
    /// Fields v1 does not define.
    pub extra: Extra,
}

/// An array job (v1.x `job.array`): `tasks` tasks alike, at most `max_running` of them at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    /// How many tasks.
    pub tasks: u32,
    /// How many may run at once (Slurm's `%N` throttle); absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// The tasks that may run at once: `max_running`, at most `tasks`.
    pub fn slots(&self) -> u32 {
        self.max_running.map_or(self.tasks, |m| m.min(self.tasks))
    }
}

impl JobSpec {
    /// The value of tag `key`, if the job carries it.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The GPU-hours the job asks for: gpus × requested hours, for every task of an array.
    #[inline]
    pub fn requested_gpu_hours(&self) -> f64 {
        self.gpus.as_f64() * self.requested_hours * f64::from(self.tasks())
    }

    /// Tasks: the array's, or 1.
    #[inline]
    pub fn tasks(&self) -> u32 {
        self.array.map_or(1, |a| a.tasks)
    }

    /// GPUs the job may hold at once: gpus × the tasks that may run at once.
    #[inline]
    pub fn concurrent_gpus(&self) -> Gpus {
        self.gpus.saturating_mul(self.array.map_or(1, |a| a.slots()))
    }

    /// The configuration key used by trial-before-scale: `config` when the job names one, else
    /// `image|dataset|script_hash|model_params_b`.
    pub fn config_key(&self) -> String {
        let mut s = String::new();
        self.write_config_key(&mut s);
        s
    }

    /// Whether the job names a configuration at all: `config`, or any of image, dataset, script hash
    /// and model size. Jobs without one (a bare trace) share the key `|||` and are never treated as
    /// runs of the same configuration by the report's reruns or by measured throughput.
    pub fn has_config(&self) -> bool {
        self.config.is_some()
            || [&self.image, &self.dataset, &self.script_hash]
                .into_iter()
                .any(|p| p.as_deref().is_some_and(|s| !s.is_empty()))
            || self.model_params_b.is_some()
    }

    /// Appends [`JobSpec::config_key`] to `out` (no allocation when `out` has room).
    pub fn write_config_key(&self, out: &mut String) {
        if let Some(c) = &self.config {
            out.push_str(c);
            return;
        }
        for (i, part) in [&self.image, &self.dataset, &self.script_hash].into_iter().enumerate() {
            if i > 0 {
                out.push('|');
            }
            out.push_str(part.as_deref().unwrap_or(""));
        }
        out.push('|');
        if let Some(p) = self.model_params_b {
            // Up to three decimals, written with integer arithmetic: 7 → "7", 1.5 → "1.5".
            let milli = (p * 1000.0).round();
            if milli.is_finite() && milli.abs() < 9e15 {
                let milli = milli as i64;
                crate::time::push_int(out, milli / 1000);
                let mut frac = (milli % 1000).abs();
                if frac != 0 {
                    out.push('.');
                    let mut digits = [b'0'; 3];
                    for d in digits.iter_mut().rev() {
                        *d = b'0' + (frac % 10) as u8;
                        frac /= 10;
                    }
                    let len = digits.iter().rposition(|&d| d != b'0').map_or(0, |p| p + 1);
                    out.extend(digits[..len].iter().map(|&d| char::from(d)));
                }
            }
        }
    }
}

/// Readiness declared by the submitter; `None` means not declared. Keys bursar does not know
/// (`"weights": true`) are kept in `extra`, like everywhere else in an event.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ready {
    /// The image is built and pushed.
    pub image: Option<bool>,
    /// The data is staged.
    pub data: Option<bool>,
    /// The scripts are final.
    pub script: Option<bool>,
    /// Keys v1 does not define, kept verbatim.
    pub extra: Extra,
}

impl Ready {
    /// Everything declared ready (image, data and script).
    pub fn all() -> Ready {
        Ready { image: Some(true), data: Some(true), script: Some(true), extra: Vec::new() }
    }

    /// True when nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.image.is_none() && self.data.is_none() && self.script.is_none() && self.extra.is_empty()
    }
}

impl Serialize for Ready {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in [("image", self.image), ("data", self.data), ("script", self.script)] {
            if let Some(v) = v {
                m.serialize_entry(k, &v)?;
            }
        }
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Ready {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ready;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of readiness flags such as {\"image\": true, \"data\": false}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ready, A::Error> {
                let mut r = Ready::default();
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    match &*key {
                        "image" => r.image = map.next_value()?,
                        "data" => r.data = map.next_value()?,
                        "script" => r.script = map.next_value()?,
                        _ => r.extra.push((key.into_owned(), map.next_value()?)),
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishStatus {
    /// Exited successfully.
    Succeeded,
    /// Crashed or exited non-zero.
    Failed,
    /// Cancelled by a person or the scheduler.
    Cancelled,
}

impl FinishStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishStatus::Succeeded => "succeeded",
            FinishStatus::Failed => "failed",
            FinishStatus::Cancelled => "cancelled",
        }
    }
}

/// A charge from the billing system.
#[derive(Debug, Clone, PartialEq)]
pub struct BillingCharge {
    /// Project charged. v1.x: may be absent when `job_id` names the job (its project is charged) or
    /// when the charge is `unattributed`.
    pub project: Option<String>,
    /// Job the charge is for, if any.
    pub job_id: Option<String>,
    /// GPU-hours charged.
    pub gpu_hours: f64,
    /// Money charged.
    pub amount: Option<f64>,
    /// ISO currency code.
    pub currency: Option<String>,
    /// Billing mode.
    pub mode: Option<BillingMode>,
    /// v1.x: how the charge found its owner ([`crate::bill::Attribution`]).
    pub attribution: Option<crate::bill::Attribution>,
    /// v1.x: the bill line it came from ([`crate::bill::BillLine`]).
    pub bill: Option<Box<crate::bill::BillLine>>,
}

/// How GPU time is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BillingMode {
    /// Pay per GPU-hour.
    OnDemand,
    /// A reserved block.
    Reserved,
    /// Per task.
    PerTask,
}

/// A reusable artefact: a prepared dataset or a built image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asset {
    /// `dataset` or `image`.
    pub kind: String,
    /// Dataset + script fingerprint, or image reference.
    pub fingerprint: String,
    /// Where it lives.
    #[serde(default)]
    pub uri: String,
    /// Extension (v1.x): the region this copy is in. The same fingerprint registered again with
    /// another region is another copy of it (cross-region placement and `GET /v1/estimate` count
    /// where a job's dataset has a copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// Why a line is not a v1 event.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or not an object of the right shape.
    #[error("column {column}: {message}")]
    Json {
        /// 1-based column where the JSON parser stopped.
        column: usize,
        /// What it found.
        message: String,
    },
    /// Valid JSON but not a valid event.
    #[error("{0}")]
    Invalid(String),
}

/// Decodes one line of wire format v1 that must be a policy-visible event (not an action record or
/// bursar's own wall tick; see [`decode_input`] for those).
pub fn decode_event(line: &str) -> Result<Event, DecodeError> {
    let mut de = serde_json::Deserializer::from_str(line);
    let event = match Event::deserialize(&mut de) {
        Ok(e) => e,
        Err(e) => return Err(classify(e)),
    };
    de.end().map_err(classify)?;
    Ok(event)
}

/// Decodes one line into any [`Input`]: a v1 event, an action record (`action.executed`,
/// `action.failed`) or bursar's own wall tick (`bursar.tick`). Which of them a source may send is the
/// session's rule, not the decoder's.
pub fn decode_input(line: &str) -> Result<Input, DecodeError> {
    let mut de = serde_json::Deserializer::from_str(line);
    let input = match Input::deserialize(&mut de) {
        Ok(e) => e,
        Err(e) => return Err(classify(e)),
    };
    de.end().map_err(classify)?;
    Ok(input)
}

fn classify(e: serde_json::Error) -> DecodeError {
    use serde_json::error::Category;
    let mut message = e.to_string();
    // serde_json appends " at line L column C"; the caller reports the line, so keep the column only.
    if let Some(cut) = message.rfind(" at line ") {
        message.truncate(cut);
    }
    match e.classify() {
        Category::Data if e.column() == 0 => DecodeError::Invalid(message),
        _ => DecodeError::Json { column: e.column(), message },
    }
}

/// A map key that may or may not borrow from the input.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A timestamp field, parsed as it is read.
struct Time(Timestamp);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Time;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 time string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Time, E> {
                Timestamp::parse(v).map(Time).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// `v` with a negative zero made positive: the one number JSON can write two ways that compare
/// equal, which the audit log's SQLite columns would give back as `0.0` while the hashed JSON kept
/// `-0.0` (issue 56). Every number of an event is read through here, once, at decode.
fn normal(v: f64) -> f64 {
    if v == 0.0 { 0.0 } else { v }
}

fn fraction<E: de::Error>(field: &str, v: f64) -> Result<f64, E> {
    let v = normal(v);
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else if (0.0..=100.0).contains(&v) {
        Err(E::custom(format!("`{field}` must be a fraction from 0 to 1, got {v} (a percentage? divide by 100)")))
    } else {
        Err(E::custom(format!("`{field}` must be a fraction from 0 to 1, got {v}")))
    }
}

fn non_negative<E: de::Error>(field: &str, v: f64) -> Result<f64, E> {
    let v = normal(v);
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(E::custom(format!("`{field}` must be a number of at least 0, got {v}")))
    }
}

/// The largest values v1 accepts, so an absurd number (`"requested_hours": 1e300`) is refused at the
/// door with a message instead of turning into `inf` in a reason. Documented in `docs/wire-format.md`.
pub mod limits {
    /// GPUs of one job.
    pub const GPUS: u32 = 1_000_000;
    /// Nodes of one job.
    pub const NODES: u32 = 100_000;
    /// Requested wall-clock hours of one job (about 114 years).
    pub const REQUESTED_HOURS: f64 = 1_000_000.0;
    /// Memory of one GPU, GB.
    pub const GPU_MEM_GB: f64 = 100_000.0;
    /// Model size, billions of parameters.
    pub const MODEL_PARAMS_B: f64 = 1_000_000.0;
    /// GPU-hours of one billing charge.
    pub const CHARGE_GPU_HOURS: f64 = 1e9;
    /// Money of one billing charge, either sign.
    pub const CHARGE_AMOUNT: f64 = 1e15;
    /// Frame-buffer MiB, throughput and progress of a sample.
    pub const SAMPLE_QUANTITY: f64 = 1e18;
    /// Tasks of one array job (Slurm's own MaxArraySize cannot exceed 4,000,001).
    pub const ARRAY_TASKS: u32 = 4_000_001;
    /// The longest confirmation window of an admission: one week.
    pub const CONFIRM_WITHIN_S: u32 = 7 * 24 * 3600;
}

/// A number as a person writes it: `1e300` rather than three hundred digits.
fn shown(v: f64) -> String {
    if v.is_finite() && (v.abs() >= 1e16 || (v != 0.0 && v.abs() < 1e-6)) { format!("{v:e}") } else { format!("{v}") }
}

fn bounded<E: de::Error>(field: &str, v: f64, max: f64) -> Result<f64, E> {
    let v = non_negative(field, v)?;
    if v > max {
        return Err(E::custom(format!(
            "`{field}` is {}, above the largest value bursar accepts ({})",
            shown(v),
            shown(max)
        )));
    }
    Ok(v)
}

/// A GPU count's error, naming its field.
fn gpus_error<E: de::Error>(field: &str, e: E) -> E {
    E::custom(format!("`{field}`: {e}"))
}

/// A sample's `gpus` counts devices (a MIG instance is one): a whole number.
fn devices<E: de::Error>(g: Gpus) -> Result<u32, E> {
    if g.is_whole() {
        Ok(g.floor())
    } else {
        Err(E::custom(format!("a sample's `gpus` counts devices (a MIG instance is one), not a share: {g}")))
    }
}

fn bounded_int<E: de::Error>(field: &str, v: u32, max: u32) -> Result<u32, E> {
    if v > max {
        return Err(E::custom(format!("`{field}` is {v}, above the largest value bursar accepts ({max})")));
    }
    Ok(v)
}

/// Keeps a field the event's type does not use: it was read (its name is a v1 field of another type),
/// so it goes back among the producer's extra fields rather than being dropped.
fn keep<T: Serialize>(extra: &mut Extra, name: &str, v: Option<T>) {
    if let Some(v) = v
        && let Ok(text) = serde_json::to_string(&v)
        && let Ok(raw) = RawValue::from_string(text)
    {
        extra.push((name.to_owned(), RawJson(raw)));
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_map(InputVisitor)? {
            Input::Event(e) => Ok(e),
            other => Err(de::Error::custom(format!(
                "`{}` is not an event type policies see (it is accepted only where bursar reads its own journal or an agent's record)",
                other.type_name()
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(InputVisitor)
    }
}

struct InputVisitor;

impl<'de> Visitor<'de> for InputVisitor {
    type Value = Input;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object with `id`, `time` and `type`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Input, A::Error> {
        let mut id: Option<String> = None;
        let mut time: Option<Timestamp> = None;
        let mut ty: Option<Key<'de>> = None;
        let mut job: Option<JobSpec> = None;
        let mut job_id: Option<String> = None;
        let mut gpu_util: Option<f64> = None;
        let mut mem_util: Option<f64> = None;
        let mut gpu_util_max: Option<f64> = None;
        let mut fb_used_mib: Option<f64> = None;
        let mut gpus: Option<Gpus> = None;
        let mut throughput: Option<f64> = None;
        let mut progress: Option<f64> = None;
        let mut unit: Option<String> = None;
        let mut sm_active: Option<f64> = None;
        let mut input_wait: Option<f64> = None;
        let mut attribution: Option<crate::bill::Attribution> = None;
        let mut bill: Option<crate::bill::BillLine> = None;
        let mut status: Option<FinishStatus> = None;
        let mut by: Option<String> = None;
        let mut project: Option<String> = None;
        let mut gpu_hours: Option<f64> = None;
        let mut amount: Option<f64> = None;
        let mut currency: Option<String> = None;
        let mut mode: Option<BillingMode> = None;
        let mut asset: Option<Asset> = None;
        let mut decision_id: Option<String> = None;
        let mut decision_seq: Option<u64> = None;
        let mut action: Option<String> = None;
        let mut detail: Option<String> = None;
        let mut attempts: Option<u32> = None;
        let mut parent: Option<String> = None;
        let mut released_by: Option<String> = None;
        let mut extra: Extra = Vec::new();

        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match &*key {
                "id" => id = Some(map.next_value()?),
                "time" => time = Some(map.next_value::<Time>()?.0),
                "type" => ty = Some(map.next_value()?),
                "job" => job = Some(map.next_value()?),
                "job_id" => job_id = map.next_value()?,
                "gpu_util" => gpu_util = Some(fraction("gpu_util", map.next_value()?)?),
                "mem_util" => {
                    mem_util = map.next_value::<Option<f64>>()?.map(|v| fraction("mem_util", v)).transpose()?
                }
                "gpu_util_max" => {
                    gpu_util_max = map.next_value::<Option<f64>>()?.map(|v| fraction("gpu_util_max", v)).transpose()?
                }
                "fb_used_mib" => {
                    fb_used_mib = map
                        .next_value::<Option<f64>>()?
                        .map(|v| bounded("fb_used_mib", v, limits::SAMPLE_QUANTITY))
                        .transpose()?
                }
                "gpus" => gpus = map.next_value::<Option<Gpus>>().map_err(|e| gpus_error("gpus", e))?,
                "throughput" => {
                    throughput = map
                        .next_value::<Option<f64>>()?
                        .map(|v| bounded("throughput", v, limits::SAMPLE_QUANTITY))
                        .transpose()?
                }
                "progress" => {
                    progress = map
                        .next_value::<Option<f64>>()?
                        .map(|v| bounded("progress", v, limits::SAMPLE_QUANTITY))
                        .transpose()?
                }
                "unit" => unit = map.next_value()?,
                "sm_active" => {
                    sm_active = map.next_value::<Option<f64>>()?.map(|v| fraction("sm_active", v)).transpose()?
                }
                "input_wait" => {
                    input_wait = map.next_value::<Option<f64>>()?.map(|v| fraction("input_wait", v)).transpose()?
                }
                "attribution" => attribution = map.next_value()?,
                "bill" => bill = map.next_value()?,
                "status" => status = Some(map.next_value()?),
                "by" => by = map.next_value()?,
                "project" => project = Some(map.next_value()?),
                // Signed here: a correction of a closed period (v1.x `bill.correction`) may take card-hours
                // back; every other charge is checked to be at least 0 below.
                "gpu_hours" => {
                    let v: f64 = map.next_value()?;
                    if !(v.is_finite() && v.abs() <= limits::CHARGE_GPU_HOURS) {
                        return Err(de::Error::custom(format!(
                            "`gpu_hours` is {}, above the largest value bursar accepts ({})",
                            shown(v),
                            shown(limits::CHARGE_GPU_HOURS)
                        )));
                    }
                    gpu_hours = Some(v)
                }
                "amount" => {
                    amount = map
                        .next_value::<Option<f64>>()?
                        .map(|v| {
                            if v.is_finite() && v.abs() <= limits::CHARGE_AMOUNT {
                                Ok(normal(v))
                            } else {
                                Err(de::Error::custom(format!(
                                    "`amount` is {v}, beyond what bursar accepts (±{})",
                                    limits::CHARGE_AMOUNT
                                )))
                            }
                        })
                        .transpose()?
                }
                "currency" => currency = map.next_value()?,
                "mode" => mode = map.next_value()?,
                "asset" => asset = Some(map.next_value()?),
                "decision_id" => decision_id = map.next_value()?,
                "decision_seq" => decision_seq = map.next_value()?,
                "action" => action = map.next_value()?,
                "detail" => detail = map.next_value()?,
                "attempts" => attempts = map.next_value()?,
                "parent" => parent = map.next_value()?,
                "released_by" => released_by = map.next_value()?,
                _ => extra.push((key.into_owned(), map.next_value()?)),
            }
        }

        let id = id.ok_or_else(|| de::Error::missing_field("id"))?;
        if id.is_empty() {
            return Err(de::Error::custom("`id` must not be empty"));
        }
        let time = time.ok_or_else(|| de::Error::missing_field("time"))?;
        let ty = ty.ok_or_else(|| de::Error::missing_field("type"))?;
        let need = |v: Option<String>, f: &'static str| v.ok_or_else(|| de::Error::missing_field(f));
        let ty = ty.0.as_ref();

        // Fields of other types than this one are the producer's own: keep them.
        let sample_type = ty == "job.sample";
        let run_type = ty == crate::input::RUN_TYPE;
        let start_type = ty == "job.started";
        if !start_type {
            keep(&mut extra, "parent", parent.take());
            keep(&mut extra, "released_by", released_by.take());
        }
        if !sample_type && !run_type && !start_type {
            keep(&mut extra, "gpu_util", gpu_util.take());
            keep(&mut extra, "mem_util", mem_util.take());
            keep(&mut extra, "gpu_util_max", gpu_util_max.take());
            keep(&mut extra, "fb_used_mib", fb_used_mib.take());
            keep(&mut extra, "gpus", gpus.take());
        }
        if !sample_type {
            keep(&mut extra, "throughput", throughput.take());
            keep(&mut extra, "progress", progress.take());
            keep(&mut extra, "unit", unit.take());
            keep(&mut extra, "sm_active", sm_active.take());
            keep(&mut extra, "input_wait", input_wait.take());
        }
        if ty != "job.finished" && !run_type {
            keep(&mut extra, "status", status.take());
        }
        if !matches!(ty, "job.keepalive" | "approval.granted" | "approval.rejected") {
            keep(&mut extra, "by", by.take());
        }
        if !matches!(ty, "billing.charge" | "asset.registered") {
            keep(&mut extra, "project", project.take());
        }
        if ty != "billing.charge" {
            keep(&mut extra, "gpu_hours", gpu_hours.take());
            keep(&mut extra, "amount", amount.take());
            keep(&mut extra, "currency", currency.take());
            keep(&mut extra, "mode", mode.take());
            keep(&mut extra, "attribution", attribution.take());
            keep(&mut extra, "bill", bill.take());
        }
        if ty != "asset.registered" {
            keep(&mut extra, "asset", asset.take());
        }
        if ty != "job.submitted" {
            keep(&mut extra, "job", job.take());
        }
        let action_type = matches!(ty, "action.executed" | "action.failed");
        if !action_type {
            keep(&mut extra, "decision_id", decision_id.take());
            keep(&mut extra, "decision_seq", decision_seq.take());
            keep(&mut extra, "action", action.take());
            keep(&mut extra, "detail", detail.take());
            keep(&mut extra, "attempts", attempts.take());
        }
        if ty == crate::input::INVENTORY_TYPE {
            let take =
                |extra: &mut Extra, key: &str| extra.iter().position(|(k, _)| k == key).map(|i| extra.remove(i).1);
            let rows = take(&mut extra, "capacity").ok_or_else(|| de::Error::missing_field("capacity"))?;
            let capacity = serde_json::from_str::<Vec<crate::input::CapacityRow>>(rows.get())
                .map_err(|e| de::Error::custom(format!("`capacity`: {e}")))?;
            if capacity.len() > crate::input::INVENTORY_ROWS {
                return Err(de::Error::custom(format!(
                    "`capacity` has {} rows, above the {} one inventory may carry",
                    capacity.len(),
                    crate::input::INVENTORY_ROWS
                )));
            }
            // Each count was bounded by `Gpus`' own reading (at most `limits::GPUS`).
            for row in &capacity {
                if let Some(b) = &row.backfill
                    && !matches!(b.as_str(), "easy" | "strict" | "best_effort")
                {
                    return Err(de::Error::custom(format!(
                        "`backfill` is `easy`, `strict` or `best_effort`, not `{b}`"
                    )));
                }
            }
            let source = match take(&mut extra, "source") {
                Some(raw) => Some(
                    serde_json::from_str::<String>(raw.get())
                        .map_err(|_| de::Error::custom("`source` must be a string"))?,
                ),
                None => None,
            };
            return Ok(Input::Inventory(crate::input::Inventory { id, time, source, capacity }));
        }
        if matches!(ty, "job.submitted" | "asset.registered" | "clock.tick" | crate::input::WALL_TICK_TYPE) {
            keep(&mut extra, "job_id", job_id.take());
        }

        let kind = match ty {
            "job.submitted" => EventKind::JobSubmitted(Box::new(job.ok_or_else(|| de::Error::missing_field("job"))?)),
            "job.started" => {
                // `gpus` of a start is what the run holds; the same field of other types went to
                // `extra` above, except for samples and run facts, which read it themselves.
                let info = StartInfo {
                    gpus,
                    parent: parent.filter(|p| !p.is_empty()),
                    released_by: released_by.filter(|p| !p.is_empty()),
                };
                let job_id = need(job_id, "job_id")?;
                if info.parent.as_deref() == Some(job_id.as_str()) {
                    return Err(de::Error::custom("`parent` names the job itself: a task's `job_id` is its own id"));
                }
                EventKind::JobStarted { job_id, info }
            }
            "job.queued" => EventKind::JobQueued { job_id: need(job_id, "job_id")? },
            "job.requeued" => EventKind::JobRequeued { job_id: need(job_id, "job_id")? },
            "job.sample" => EventKind::JobSample(Sample {
                job_id: need(job_id, "job_id")?,
                gpu_util: gpu_util.ok_or_else(|| de::Error::missing_field("gpu_util"))?,
                mem_util,
                gpu_util_max,
                fb_used_mib,
                gpus: gpus.map(devices::<A::Error>).transpose()?,
                throughput,
                progress,
                unit,
                sm_active,
                input_wait,
            }),
            "job.finished" => EventKind::JobFinished {
                job_id: need(job_id, "job_id")?,
                status: status.ok_or_else(|| de::Error::missing_field("status"))?,
            },
            "job.keepalive" => EventKind::JobKeepalive { job_id: need(job_id, "job_id")?, by },
            "billing.charge" => {
                // v1.x: a charge that names its job is the job's project's; an unattributed one is
                // nobody's. Any other charge must still name its project.
                let unattributed = attribution == Some(crate::bill::Attribution::Unattributed);
                if project.is_none() && job_id.is_none() && !unattributed {
                    return Err(de::Error::custom(
                        "missing field `project`: a charge names its `project`, or the `job_id` it is for, or says `\"attribution\": \"unattributed\"`",
                    ));
                }
                if unattributed && project.is_some() {
                    return Err(de::Error::custom("an `unattributed` charge names no `project`"));
                }
                if let Some(b) = &bill {
                    b.check().map_err(de::Error::custom)?;
                }
                let gpu_hours = gpu_hours.ok_or_else(|| de::Error::missing_field("gpu_hours"))?;
                if gpu_hours < 0.0 && !bill.as_ref().is_some_and(|b| b.correction) {
                    return Err(de::Error::custom(format!(
                        "`gpu_hours` must be a number of at least 0, got {gpu_hours} (only a correction, `bill.correction`, takes card-hours back)"
                    )));
                }
                EventKind::BillingCharge(BillingCharge {
                    project,
                    job_id,
                    gpu_hours,
                    amount,
                    currency,
                    mode,
                    attribution,
                    bill: bill.map(Box::new),
                })
            }
            "approval.granted" => EventKind::ApprovalGranted { job_id: need(job_id, "job_id")?, by },
            "approval.rejected" => EventKind::ApprovalRejected { job_id: need(job_id, "job_id")?, by },
            "asset.registered" => EventKind::AssetRegistered {
                project: need(project, "project")?,
                asset: asset.ok_or_else(|| de::Error::missing_field("asset"))?,
            },
            "clock.tick" => EventKind::ClockTick,
            "action.executed" | "action.failed" => {
                let outcome = if ty == "action.executed" { ActionOutcome::Executed } else { ActionOutcome::Failed };
                return Ok(Input::Action(Action {
                    id,
                    time,
                    outcome,
                    decision_id: need(decision_id, "decision_id")?,
                    decision_seq,
                    job_id,
                    action: need(action, "action")?,
                    detail,
                    attempts,
                    extra,
                }));
            }
            crate::input::WALL_TICK_TYPE => return Ok(Input::WallTick(WallTick { time })),
            crate::input::LEDGER_TYPE => {
                let op = match extra.iter().position(|(k, _)| k == "op") {
                    Some(i) => extra.remove(i).1,
                    None => return Err(de::Error::missing_field("op")),
                };
                let op = serde_json::from_str::<crate::input::LedgerChange>(op.get())
                    .map_err(|e| de::Error::custom(format!("`op`: {e}")))?;
                return Ok(Input::Ledger(crate::input::LedgerOp { id, time, op }));
            }
            crate::input::RUN_TYPE => {
                let config = match extra.iter().position(|(k, _)| k == "config") {
                    Some(i) => extra.remove(i).1,
                    None => return Err(de::Error::missing_field("config")),
                };
                let config = serde_json::from_str::<&str>(config.get())
                    .ok()
                    .filter(|h| h.len() == 16)
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(|| de::Error::custom("`config` must be 16 hexadecimal digits"))?;
                return Ok(Input::Run(crate::input::RunFact {
                    id,
                    time,
                    config,
                    gpus: gpus.ok_or_else(|| de::Error::missing_field("gpus"))?,
                    status: status.ok_or_else(|| de::Error::missing_field("status"))?,
                }));
            }
            other => {
                return Err(de::Error::custom(format!(
                    "unknown event type `{other}`, expected one of {}",
                    EVENT_TYPES.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
                )));
            }
        };
        Ok(Input::Event(Event { id, time, kind, extra }))
    }
}

impl<'de> Deserialize<'de> for JobSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(JobVisitor)
    }
}

struct JobVisitor;

impl<'de> Visitor<'de> for JobVisitor {
    type Value = JobSpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a job object with at least `id` and `project`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobSpec, A::Error> {
        let mut j = JobSpec { nodes: 1, ..JobSpec::default() };
        let (mut has_id, mut has_project) = (false, false);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match &*key {
                "id" => {
                    j.id = map.next_value()?;
                    has_id = true;
                }
                "project" => {
                    j.project = map.next_value()?;
                    has_project = true;
                }
                "user" => j.user = map.next_value::<Option<String>>()?.unwrap_or_default(),
                "queue" => j.queue = map.next_value()?,
                "gpus" => j.gpus = map.next_value::<Gpus>().map_err(|e| gpus_error("job.gpus", e))?,
                "gpu_type" => j.gpu_type = map.next_value()?,
                "gpu_mem_gb" => {
                    j.gpu_mem_gb = map
                        .next_value::<Option<f64>>()?
                        .map(|v| bounded("job.gpu_mem_gb", v, limits::GPU_MEM_GB))
                        .transpose()?
                }
                "nodes" => j.nodes = bounded_int("job.nodes", map.next_value()?, limits::NODES)?,
                "requested_hours" => {
                    j.requested_hours = bounded("job.requested_hours", map.next_value()?, limits::REQUESTED_HOURS)?
                }
                "stage" => j.stage = map.next_value()?,
                "model_params_b" => {
                    j.model_params_b = map
                        .next_value::<Option<f64>>()?
                        .map(|v| bounded("job.model_params_b", v, limits::MODEL_PARAMS_B))
                        .transpose()?
                }
                "image" => j.image = map.next_value()?,
                "dataset" => j.dataset = map.next_value()?,
                "script_hash" => j.script_hash = map.next_value()?,
                "ready" => j.ready = map.next_value::<Option<Ready>>()?.unwrap_or_default(),
                "deferrable" => j.deferrable = map.next_value::<Option<bool>>()?.unwrap_or(false),
                "tags" => {
                    let tags: Option<std::collections::BTreeMap<String, String>> = map.next_value()?;
                    j.tags = tags.unwrap_or_default().into_iter().collect();
                }
                "mixed_precision" => j.mixed_precision = map.next_value()?,
                "batch_size" => j.batch_size = map.next_value()?,
                "dataloader_workers" => j.dataloader_workers = map.next_value()?,
                "interconnect" => j.interconnect = map.next_value()?,
                "region" => j.region = map.next_value()?,
                "config" => j.config = map.next_value()?,
                "replaces" => j.replaces = map.next_value::<Option<String>>()?.filter(|r| !r.is_empty()),
                "array" => {
                    j.array = map.next_value::<Option<ArraySpec>>()?;
                    if let Some(a) = j.array {
                        if a.tasks == 0 {
                            return Err(de::Error::custom("`job.array.tasks` must be at least 1"));
                        }
                        bounded_int("job.array.tasks", a.tasks, limits::ARRAY_TASKS)?;
                        if a.max_running == Some(0) {
                            return Err(de::Error::custom("`job.array.max_running` must be at least 1"));
                        }
                    }
                }
                "confirm_within_s" => {
                    j.confirm_within_s = map
                        .next_value::<Option<u32>>()?
                        .map(|v| bounded_int("job.confirm_within_s", v, limits::CONFIRM_WITHIN_S))
                        .transpose()?
                }
                _ => j.extra.push((key.into_owned(), map.next_value()?)),
            }
        }
        if !has_id || j.id.is_empty() {
            return Err(de::Error::custom("`job.id` is missing or empty"));
        }
        if !has_project || j.project.is_empty() {
            return Err(de::Error::custom("`job.project` is missing or empty"));
        }
        if j.nodes == 0 {
            return Err(de::Error::custom("`job.nodes` must be at least 1"));
        }
        Ok(j)
    }
}

impl Serialize for JobSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("project", &self.project)?;
        m.serialize_entry("user", &self.user)?;
        if let Some(v) = &self.queue {
            m.serialize_entry("queue", v)?;
        }
        m.serialize_entry("gpus", &self.gpus)?;
        if let Some(v) = &self.gpu_type {
            m.serialize_entry("gpu_type", v)?;
        }
        if let Some(v) = &self.gpu_mem_gb {
            m.serialize_entry("gpu_mem_gb", v)?;
        }
        m.serialize_entry("nodes", &self.nodes)?;
        m.serialize_entry("requested_hours", &self.requested_hours)?;
        macro_rules! opt {
            ($($f:ident),*) => {$(if let Some(v) = &self.$f { m.serialize_entry(stringify!($f), v)?; })*};
        }
        opt!(stage, model_params_b, image, dataset, script_hash);
        if !self.ready.is_empty() {
            m.serialize_entry("ready", &self.ready)?;
        }
        m.serialize_entry("deferrable", &self.deferrable)?;
        if !self.tags.is_empty() {
            let tags: std::collections::BTreeMap<&str, &str> =
                self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            m.serialize_entry("tags", &tags)?;
        }
        opt!(
            mixed_precision,
            batch_size,
            dataloader_workers,
            interconnect,
            region,
            config,
            replaces,
            array,
            confirm_within_s
        );
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for Event {
    /// The canonical form: known fields first in a fixed order, then the producer's extra fields.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("time", &self.time.text())?;
        m.serialize_entry("type", self.kind.type_name())?;
        match &self.kind {
            EventKind::JobSubmitted(job) => m.serialize_entry("job", job)?,
            EventKind::JobStarted { job_id, info } => {
                m.serialize_entry("job_id", job_id)?;
                if let Some(v) = info.gpus {
                    m.serialize_entry("gpus", &v)?;
                }
                if let Some(v) = &info.parent {
                    m.serialize_entry("parent", v)?;
                }
                if let Some(v) = &info.released_by {
                    m.serialize_entry("released_by", v)?;
                }
            }
            EventKind::JobQueued { job_id } | EventKind::JobRequeued { job_id } => {
                m.serialize_entry("job_id", job_id)?
            }
            EventKind::JobSample(x) => {
                m.serialize_entry("job_id", &x.job_id)?;
                m.serialize_entry("gpu_util", &x.gpu_util)?;
                macro_rules! opt {
                    ($($f:ident),*) => {$(if let Some(v) = &x.$f { m.serialize_entry(stringify!($f), v)?; })*};
                }
                opt!(mem_util, gpu_util_max, fb_used_mib, gpus, throughput, progress, unit, sm_active, input_wait);
            }
            EventKind::JobFinished { job_id, status } => {
                m.serialize_entry("job_id", job_id)?;
                m.serialize_entry("status", status)?;
            }
            EventKind::JobKeepalive { job_id, by }
            | EventKind::ApprovalGranted { job_id, by }
            | EventKind::ApprovalRejected { job_id, by } => {
                m.serialize_entry("job_id", job_id)?;
                if let Some(v) = by {
                    m.serialize_entry("by", v)?;
                }
            }
            EventKind::BillingCharge(c) => {
                if let Some(v) = &c.project {
                    m.serialize_entry("project", v)?;
                }
                if let Some(v) = &c.job_id {
                    m.serialize_entry("job_id", v)?;
                }
                m.serialize_entry("gpu_hours", &c.gpu_hours)?;
                if let Some(v) = &c.amount {
                    m.serialize_entry("amount", v)?;
                }
                if let Some(v) = &c.currency {
                    m.serialize_entry("currency", v)?;
                }
                if let Some(v) = &c.mode {
                    m.serialize_entry("mode", v)?;
                }
                if let Some(v) = &c.attribution {
                    m.serialize_entry("attribution", v)?;
                }
                if let Some(v) = &c.bill {
                    m.serialize_entry("bill", v)?;
                }
            }
            EventKind::AssetRegistered { project, asset } => {
                m.serialize_entry("project", project)?;
                m.serialize_entry("asset", asset)?;
            }
            EventKind::ClockTick => {}
        }
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Event {
    /// The event in its canonical JSON form (one line).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBMIT: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"alice","queue":"short","gpus":8,"gpu_type":"H200","gpu_mem_gb":141,"nodes":1,"requested_hours":4.0,"stage":"finetune","model_params_b":7.0,"image":"registry/llm:1.4","dataset":"ds-42","script_hash":"sha256:ab12","ready":{"image":true,"data":true,"script":true},"deferrable":false,"tags":{"team":"search"}}}"#;

    #[test]
    fn decodes_the_brief_example() {
        let e = decode_event(SUBMIT).unwrap();
        assert_eq!(e.id, "e1");
        let EventKind::JobSubmitted(j) = &e.kind else { panic!("wrong kind") };
        assert_eq!(j.gpus, 8);
        assert_eq!(j.tag("team"), Some("search"));
        assert_eq!(j.ready.data, Some(true));
        assert_eq!(j.requested_gpu_hours(), 32.0);
    }

    #[test]
    fn config_keys() {
        let mut j = JobSpec { image: Some("img".into()), model_params_b: Some(7.0), ..JobSpec::default() };
        assert_eq!(j.config_key(), "img|||7");
        for (p, text) in [(1.25, "1.25"), (1.05, "1.05"), (0.001, "0.001"), (2.1, "2.1"), (70.0, "70"), (-1.5, "-1.5")]
        {
            j.model_params_b = Some(p);
            assert_eq!(j.config_key(), format!("img|||{text}"), "{p}");
        }
        j.config = Some("named".into());
        assert_eq!(j.config_key(), "named");
        assert!(j.has_config());
        let bare = JobSpec { image: Some(String::new()), ..JobSpec::default() };
        assert!(!bare.has_config(), "an empty image names nothing: the key is `|||`");
        assert!(JobSpec { model_params_b: Some(7.0), ..JobSpec::default() }.has_config());
    }

    #[test]
    fn every_type_decodes() {
        let lines = [
            r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"job.started","job_id":"j1"}"#,
            r#"{"id":"b","time":"2026-11-02T09:00:00Z","type":"job.sample","job_id":"j1","gpu_util":0.03,"mem_util":0.41}"#,
            r#"{"id":"c","time":"2026-11-02T09:00:00Z","type":"job.finished","job_id":"j1","status":"failed"}"#,
            r#"{"id":"d","time":"2026-11-02T09:00:00Z","type":"job.keepalive","job_id":"j1","by":"alice"}"#,
            r#"{"id":"e","time":"2026-11-02T09:00:00Z","type":"billing.charge","project":"nlp","job_id":"j1","gpu_hours":32.0,"amount":480.0,"currency":"CNY","mode":"on_demand"}"#,
            r#"{"id":"f","time":"2026-11-02T09:00:00Z","type":"approval.granted","job_id":"j1","by":"bob"}"#,
            r#"{"id":"g","time":"2026-11-02T09:00:00Z","type":"approval.rejected","job_id":"j1","by":"bob"}"#,
            r#"{"id":"h","time":"2026-11-02T09:00:00Z","type":"asset.registered","project":"nlp","asset":{"kind":"dataset","fingerprint":"fp","uri":"s3://x"}}"#,
            r#"{"id":"i","time":"2026-11-02T09:00:00Z","type":"clock.tick"}"#,
            r#"{"id":"j","time":"2026-11-02T09:00:00Z","type":"job.queued","job_id":"j1"}"#,
            r#"{"id":"k","time":"2026-11-02T09:00:00Z","type":"job.requeued","job_id":"j1"}"#,
            r#"{"id":"l","time":"2026-11-02T09:00:00Z","type":"job.started","job_id":"j1_4","gpus":16,"parent":"j1","released_by":"root"}"#,
        ];
        for l in lines {
            let e = decode_event(l).unwrap_or_else(|err| panic!("{l}: {err}"));
            // Canonical form decodes to the same event.
            assert_eq!(decode_event(&e.to_json()).unwrap(), e);
        }
    }

    #[test]
    fn keeps_unknown_fields_and_accepts_any_key_order() {
        let l = r#"{"job_id":"j1","x-site":{"rack":7},"type":"job.started","time":"2026-11-02T09:00:00Z","id":"a"}"#;
        let e = decode_event(l).unwrap();
        assert_eq!(e.extra.len(), 1);
        assert_eq!(e.extra[0].0, "x-site");
        assert_eq!(e.extra[0].1.get(), r#"{"rack":7}"#);
        assert!(e.to_json().contains(r#""x-site":{"rack":7}"#));
        let j = decode_event(&SUBMIT.replace(r#""gpus":8"#, r#""gpus":8,"priority_class":"gold""#)).unwrap();
        let EventKind::JobSubmitted(j) = j.kind else { panic!() };
        assert_eq!(j.extra[0].0, "priority_class");
    }

    #[test]
    fn reasons_for_bad_lines() {
        let cases = [
            ("{", "EOF"),
            ("[1]", "invalid type"),
            (r#"{"id":"a","time":"2026-11-02T09:00:00Z"}"#, "missing field `type`"),
            (r#"{"id":"a","time":"yesterday","type":"clock.tick"}"#, "RFC 3339"),
            (r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"job.exploded"}"#, "unknown event type `job.exploded`"),
            (
                r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"job.sample","job_id":"j","gpu_util":37}"#,
                "percentage",
            ),
            (r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"job.started"}"#, "missing field `job_id`"),
            (r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"clock.tick"} x"#, "trailing"),
        ];
        for (line, want) in cases {
            let err = decode_event(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: got `{err}`, wanted `{want}`");
        }
    }

    #[test]
    fn unknown_fields_inside_ready_are_kept_not_rejected() {
        // Regression: `"weights": true` inside `ready` made the whole submission malformed, so the job
        // got no admission decision.
        let line = SUBMIT.replace(r#""script":true}"#, r#""script":true,"weights":true}"#);
        let e = decode_event(&line).unwrap();
        let EventKind::JobSubmitted(j) = &e.kind else { panic!("wrong kind") };
        assert_eq!(j.ready.script, Some(true));
        assert_eq!(j.ready.extra.len(), 1);
        assert_eq!((j.ready.extra[0].0.as_str(), j.ready.extra[0].1.get()), ("weights", "true"));
        assert!(e.to_json().contains(r#""ready":{"image":true,"data":true,"script":true,"weights":true}"#));
    }

    #[test]
    fn a_field_of_another_event_type_is_kept_as_the_producers_own() {
        let l = r#"{"id":"a","time":"2026-11-02T09:00:00Z","type":"job.started","job_id":"j1","by":"slurm","status":"failed"}"#;
        let e = decode_event(l).unwrap();
        let names: Vec<&str> = e.extra.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["status", "by"]);
        assert_eq!(decode_event(&e.to_json()).unwrap(), e);
    }

    #[test]
    fn a_mig_share_is_exact_on_the_wire_and_whole_counts_stay_integers() {
        let e = decode_event(&SUBMIT.replace(r#""gpus":8"#, r#""gpus":"2/7""#)).unwrap();
        let EventKind::JobSubmitted(j) = &e.kind else { panic!("wrong kind") };
        assert_eq!(j.gpus, Gpus::fraction(2, 7).unwrap());
        assert!(e.to_json().contains(r#""gpus":"2/7""#));
        assert_eq!(decode_event(&e.to_json()).unwrap(), e);
        assert!(decode_event(SUBMIT).unwrap().to_json().contains(r#""gpus":8,"#), "v1 producers see v1");
        let half = decode_event(&SUBMIT.replace(r#""gpus":8"#, r#""gpus":0.5"#)).unwrap();
        let EventKind::JobSubmitted(j) = &half.kind else { panic!("wrong kind") };
        assert_eq!(j.gpus.to_string(), "1/2");
        let err = decode_event(&SUBMIT.replace(r#""gpus":8"#, r#""gpus":0.2857"#)).unwrap_err().to_string();
        assert!(err.contains("job.gpus") && err.contains("\"1/7\""), "{err}");
        let start = r#"{"id":"s","time":"2026-11-02T09:00:00Z","type":"job.started","job_id":"j1","gpus":"3/7"}"#;
        let EventKind::JobStarted { info, .. } = decode_event(start).unwrap().kind else { panic!("wrong kind") };
        assert_eq!(info.gpus, Gpus::fraction(3, 7));
        let sample =
            r#"{"id":"s","time":"2026-11-02T09:00:00Z","type":"job.sample","job_id":"j1","gpu_util":0.5,"gpus":"1/7"}"#;
        assert!(decode_event(sample).unwrap_err().to_string().contains("counts devices"));
    }

    #[test]
    fn absurd_numbers_are_refused_with_the_bound() {
        let cases = [
            (SUBMIT.replace(r#""requested_hours":4.0"#, r#""requested_hours":1e300"#), "job.requested_hours"),
            (SUBMIT.replace(r#""gpus":8"#, r#""gpus":4000000000"#), "job.gpus"),
            (SUBMIT.replace(r#""model_params_b":7.0"#, r#""model_params_b":1e12"#), "job.model_params_b"),
            (
                r#"{"id":"e","time":"2026-11-02T09:00:00Z","type":"billing.charge","project":"p","gpu_hours":1e200}"#
                    .into(),
                "gpu_hours",
            ),
        ];
        for (line, field) in cases {
            let err = decode_event(&line).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains("largest value"), "{field}: {err}");
        }
    }
}
