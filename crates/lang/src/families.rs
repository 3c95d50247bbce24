//! The nine policy families of the brief and the general `rule`, each a [`Policy`].
//!
//! Every family reads its settings once at load (see `compile.rs`) into the plain structs here; at
//! run time `evaluate` does arithmetic on the event and the read-only state and pushes verdicts. Each
//! verdict is tagged with the branch (check) that produced it, which is what `bursar test --coverage`
//! counts.

use std::sync::Arc;

use bursar_engine::policy::{Deadline, Limits, QuotaLimit, QuotaScope};
use bursar_engine::{
    Context, Effect, JobPhase, JobRecord, Later, Output, Policy, PolicyMeta, Reason, ScopeKind, TimerContext, Verdict,
    VerdictKind,
};
use bursar_model::{Duration, EventKind, Gpus, Hints, JobSpec, Timestamp};

use crate::expr::{Env, Expr, Template};

/// Formats GPU-hours for people: `10,250`, `12.5`.
pub fn fmt_num(v: f64) -> String {
    let mut s = String::new();
    push_num(&mut s, v);
    s
}

/// Appends `v` exactly as `{v}` would (`f64`'s `Display`: the shortest decimal that reads back as
/// `v`), without the formatting machinery for the numbers reasons usually hold: below a million with
/// at most six decimals (`8`, `1.2`, `0.125`), it finds the fewest decimals `k` whose rounding of
/// `v × 10^k` divides back to `v` exactly. There, one `k`-digit decimal at most lies within half a unit
/// in the last place of `v` (the spacing of `f64`s below a million is under 1.2e-10), so the first `k`
/// that reads back is the shortest, and `Display`'s. Anything else goes through `Display`.
pub fn push_f64(out: &mut String, v: f64) {
    if v.abs() < 1e6 && !(v == 0.0 && v.is_sign_negative()) {
        let mut scale = 1.0;
        for k in 0..=6usize {
            let m = (v * scale).round();
            if m / scale == v {
                let m = m as i64;
                if m < 0 {
                    out.push('-');
                }
                let (int, frac) = (m.unsigned_abs() / 10u64.pow(k as u32), m.unsigned_abs() % 10u64.pow(k as u32));
                bursar_model::push_int(out, int as i64);
                if k > 0 {
                    out.push('.');
                    let mut digits = [b'0'; 6];
                    let mut f = frac;
                    for d in digits[..k].iter_mut().rev() {
                        *d = b'0' + (f % 10) as u8;
                        f /= 10;
                    }
                    out.extend(digits[..k].iter().map(|&d| char::from(d)));
                }
                return;
            }
            scale *= 10.0;
        }
    }
    use std::fmt::Write as _;
    let _ = write!(out, "{v}");
}

/// Appends `v` rounded to one decimal with thousands separators (`10,250`, `12.5`) to `out`, without
/// formatting machinery: reasons are built on the admission path.
pub fn push_num(out: &mut String, v: f64) {
    let tenths = (v * 10.0).round();
    if !tenths.is_finite() || tenths.abs() >= 9e17 {
        out.push_str(if v.is_nan() {
            "NaN"
        } else if v > 0.0 {
            "inf"
        } else {
            "-inf"
        });
        return;
    }
    let tenths = tenths as i64;
    let (mut int, frac) = (tenths.unsigned_abs() / 10, tenths.unsigned_abs() % 10);
    // Written right to left into a stack buffer, then pushed once.
    let mut b = [0u8; 32];
    let mut i = b.len();
    if frac != 0 {
        i -= 2;
        b[i] = b'.';
        b[i + 1] = b'0' + frac as u8;
    }
    let mut digits = 0;
    loop {
        if digits > 0 && digits % 3 == 0 {
            i -= 1;
            b[i] = b',';
        }
        i -= 1;
        b[i] = b'0' + (int % 10) as u8;
        int /= 10;
        digits += 1;
        if int == 0 {
            break;
        }
    }
    if tenths < 0 {
        i -= 1;
        b[i] = b'-';
    }
    out.push_str(std::str::from_utf8(&b[i..]).unwrap_or("?"));
}

/// What a policy does when its check fails.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Deny.
    Deny,
    /// Require approval.
    RequireApproval {
        /// Who may approve.
        approvers: Arc<[String]>,
        /// How long the request is open.
        expires: Duration,
    },
    /// Only alert.
    Alert,
}

impl Action {
    fn verdict(&self, reason: String) -> VerdictKind {
        let _ = reason;
        match self {
            Action::Deny => VerdictKind::Deny,
            Action::RequireApproval { approvers, expires } => {
                VerdictKind::RequireApproval { approvers: approvers.clone(), expires_after: *expires }
            }
            Action::Alert => VerdictKind::Alert,
        }
    }

    fn emit(&self, out: &mut Output, reason: String, branch: u16) {
        let kind = self.verdict(String::new());
        out.verdict(Verdict::new(kind, reason).on_branch(branch));
    }
}

/// Quota: GPU-hours per period, concurrent GPUs, per-queue caps.
///
/// The numbers are kept in the engine's [`QuotaLimit`], which is also what the policy describes of
/// itself ([`Policy::limits`]): the report's budgets and the admission check read the same values.
#[derive(Debug, Clone, PartialEq)]
pub struct Quota {
    /// Whose usage, over which period, how much, and the concurrency caps.
    pub limit: QuotaLimit,
    /// What exhaustion does.
    pub on_exhaust: Action,
}

/// Approval: which jobs need a person's yes.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// More GPUs than this.
    pub gpus_over: Option<u32>,
    /// More requested hours than this.
    pub hours_over: Option<f64>,
    /// More GPU-hours than this.
    pub gpu_hours_over: Option<f64>,
    /// These GPU types.
    pub gpu_types: Vec<String>,
    /// A general condition.
    pub when: Option<(String, Expr)>,
    /// Who may approve.
    pub approvers: Arc<[String]>,
    /// How long a request stays open.
    pub expires: Duration,
}

/// Idle reclaim settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Idle {
    /// Utilisation under this is idle.
    pub below: f64,
    /// For this long.
    pub window: Duration,
    /// Time between the alert and the reclaim.
    pub grace: Duration,
    /// Samples under `below` the window must hold before it alerts (at least 1). With 1, the first
    /// low sample starts a window that alerts when it has run its length; with more, a window that
    /// has run its length waits for the last of them, so a source that goes quiet (bad data, an
    /// outage) is never read as a job that stayed idle.
    pub min_samples: u32,
}

/// Reclaim: finished jobs, maximum runtime, idle jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Reclaim {
    /// Release at once when a job ends.
    pub on_finish: bool,
    /// Reclaim a finished job the scheduler runs again without an admission (a requeue or a start
    /// of a job that had ended).
    pub on_rerun: bool,
    /// Maximum runtime.
    pub max_runtime: Option<Duration>,
    /// Idle detection.
    pub idle: Option<Idle>,
    /// Mark keys: low-utilisation-since, alerted-at, low samples counted (only with `min_samples` > 1).
    pub keys: (u64, u64, u64),
}

/// Asset reuse: refuse to prepare again what exists.
#[derive(Debug, Clone, PartialEq)]
pub struct AssetReuse {
    /// Stages that prepare datasets.
    pub dataset_stages: Vec<String>,
    /// Stages that build images.
    pub image_stages: Vec<String>,
    /// Deny or alert.
    pub action: Action,
}

/// Readiness: image, data and scripts ready before GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// What must be ready: `image`, `data`, `script`.
    pub require: Vec<String>,
    /// Deny or alert.
    pub action: Action,
}

/// Fit: memory, interconnect, stage tiers.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// Memory check: (bytes per parameter, overhead factor, shard across GPUs).
    pub memory: Option<(f64, f64, bool)>,
    /// Interconnects multi-node jobs may use.
    pub multi_node: Option<Vec<String>>,
    /// Allowed GPU types per stage.
    pub tiers: Vec<(String, Vec<String>)>,
    /// Deny or alert.
    pub action: Action,
}

/// Trial before scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    /// Jobs with more GPUs than this need a trial.
    pub above_gpus: u32,
    /// A trial has at most this many GPUs.
    pub trial_max_gpus: u32,
    /// How recent the trial must be.
    pub within: Duration,
    /// Deny or require approval.
    pub action: Action,
}

/// A duration lane: jobs up to `max_hours` go to `queue` with `priority`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// Upper bound of requested hours.
    pub max_hours: f64,
    /// Queue hint.
    pub queue: Option<Arc<str>>,
    /// Priority hint.
    pub priority: Option<i64>,
}

/// Off-peak window for deferrable work.
#[derive(Debug, Clone, PartialEq)]
pub struct OffPeak {
    /// Start, ms after local midnight.
    pub start: i64,
    /// End, ms after local midnight.
    pub end: i64,
    /// Local offset from UTC.
    pub offset: Duration,
    /// The window as written, for reasons.
    pub label: String,
    /// Stages that are deferrable whatever the job says.
    pub stages: Vec<String>,
}

/// Placement hints.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Duration lanes, in order.
    pub lanes: Vec<Lane>,
    /// Off-peak deferral.
    pub off_peak: Option<OffPeak>,
    /// Region hint.
    pub region: Option<Arc<str>>,
    /// `[policy.cross_region]`: where a job not tied to one place can start now.
    pub cross_region: Option<CrossRegion>,
}

/// `[policy.cross_region]`: for a job not tied to one place (`deferrable`, or `region = "any"`)
/// that names its GPU type, the region that can start it now, counting where its dataset has a
/// copy (`asset.registered` with a `region`).
///
/// A region can start the job now when one of its partitions of the job's GPU type (and queue, if
/// the job names one) has as many GPUs free — the latest `pool.inventory` row's `free`, less the
/// GPUs of the jobs bursar admitted there that have not started — as the job asks. Where its
/// dataset has no copy, it starts after the copy (`copy_hours`). Of the regions that can start it,
/// the one that starts it soonest is suggested (a tie: the one with more GPUs free, then by name),
/// with the reason in the decision; when none can start it now, no region is suggested here (the
/// estimate, `GET /v1/estimate?dataset=…`, simulates when each would).
#[derive(Debug, Clone, PartialEq)]
pub struct CrossRegion {
    /// The regions it may suggest (empty: every region in the inventory).
    pub regions: Vec<Arc<str>>,
    /// How long copying a dataset to a region without a copy takes.
    pub copy: Duration,
}

/// A region that can start a job now, as [`CrossRegion::choose`] weighs it.
struct RegionFit<'a> {
    region: &'a str,
    free: Gpus,
    /// The dataset has a copy here (or no copy's region is known: no copy is counted).
    data_here: bool,
}

impl CrossRegion {
    /// Whether `job` may run in any region.
    pub fn untied(job: &JobSpec) -> bool {
        job.deferrable || job.region.as_deref().is_some_and(|r| r.eq_ignore_ascii_case("any"))
    }

    /// The region that starts `job` soonest among those that can start it now, and the sentence
    /// that says why.
    fn choose(&self, job: &JobSpec, cx: &Context<'_>) -> Option<(Arc<str>, String)> {
        let gpu_type = job.gpu_type.as_deref()?;
        if job.gpus == 0 {
            return None;
        }
        let state = cx.state;
        let copies: Vec<&str> = job
            .dataset
            .as_deref()
            .and_then(|d| state.asset(d))
            .map(|a| a.regions.iter().map(|r| r.as_str()).collect())
            .unwrap_or_default();
        let allowed = |r: &str| self.regions.is_empty() || self.regions.iter().any(|x| &**x == r);
        // The partitions of the job's type it may go to, each less what bursar admitted there and
        // has not seen start: one pass over the live jobs (this admission's cost, for a job that may
        // run anywhere under a policy with `cross_region`).
        let rows: Vec<&bursar_model::CapacityRow> = state
            .inventory()
            .map(|i| &i.row)
            .filter(|row| {
                row.gpu_type == gpu_type
                    && allowed(&row.region)
                    && !job.queue.as_deref().is_some_and(|q| !row.queue.is_empty() && row.queue != q)
            })
            .collect();
        // No partition has room even before what bursar promised is taken off: nothing to scan.
        if rows.iter().all(|row| row.free < job.gpus) {
            return None;
        }
        let mut promised = vec![Gpus::ZERO; rows.len()];
        for (id, j) in state.jobs() {
            if j.phase() != bursar_engine::JobPhase::Admitted
                || j.gpu_type() != Some(gpu_type)
                || id == job.id
                || j.set_aside()
            {
                continue;
            }
            for (k, row) in rows.iter().enumerate() {
                if (row.queue.is_empty() || j.queue() == Some(row.queue.as_str()))
                    && j.region().is_none_or(|r| r == row.region)
                {
                    promised[k] = promised[k].saturating_add(j.gpus());
                }
            }
        }
        // Free now per region: its best partition.
        let mut fits: Vec<RegionFit<'_>> = Vec::new();
        let mut short: Vec<(&str, Gpus)> = Vec::new();
        for (row, promised) in rows.into_iter().zip(promised) {
            let free = row.free.saturating_sub(promised);
            if free >= job.gpus {
                match fits.iter_mut().find(|f| f.region == row.region) {
                    Some(f) => f.free = f.free.max(free),
                    None => fits.push(RegionFit {
                        region: &row.region,
                        free,
                        data_here: copies.is_empty() || copies.contains(&row.region.as_str()),
                    }),
                }
            } else {
                match short.iter_mut().find(|(r, _)| *r == row.region) {
                    Some(s) => s.1 = s.1.max(free),
                    None => short.push((&row.region, free)),
                }
            }
        }
        short.retain(|(r, _)| !fits.iter().any(|f| f.region == *r));
        let copy_ms = self.copy.0.max(0);
        let wait = |f: &RegionFit<'_>| if f.data_here { 0 } else { copy_ms };
        fits.sort_by(|a, b| {
            wait(a)
                .cmp(&wait(b))
                .then(b.data_here.cmp(&a.data_here))
                .then(b.free.cmp(&a.free))
                .then(a.region.cmp(b.region))
        });
        let best = fits.first()?;
        let mut why = format!("region {}: {} {gpu_type} free now", best.region, best.free);
        if let Some(d) = job.dataset.as_deref().filter(|_| !copies.is_empty()) {
            if best.data_here {
                why.push_str(&format!(", where dataset `{d}` has a copy"));
            } else {
                why.push_str(&format!(
                    ", after copying dataset `{d}` there (about {}; copies in {})",
                    self.copy,
                    copies.join(", ")
                ));
            }
        }
        let others: Vec<String> = fits
            .iter()
            .skip(1)
            .map(|f| {
                let data = if f.data_here || copies.is_empty() { "" } else { " without a copy" };
                format!("{}: {} free{data}", f.region, f.free)
            })
            .chain(short.iter().map(|(r, free)| format!("{r}: {free} free")))
            .collect();
        if !others.is_empty() {
            why.push_str("; elsewhere ");
            why.push_str(&others.join(", "));
        }
        Some((Arc::from(best.region), why))
    }
}

/// Efficiency advice.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    /// Alert when mixed precision is off.
    pub mixed_precision: bool,
    /// Alert under this batch size.
    pub min_batch_size: Option<u32>,
    /// Alert when data loading runs in the training process.
    pub dataloader_workers: bool,
    /// Advice from measured throughput: a cheaper GPU type per unit of work, poor scaling.
    pub cost_per_unit: Option<CostPerUnit>,
}

/// `[policy.cost_per_unit]`: advice from the measured throughput of a job's configuration
/// ([`bursar_engine::State::throughput`]).
///
/// - **A cheaper type.** For the type the job asks and each other type with a price, the two are
///   compared at one GPU count both measured (with at least `min_runs` runs each, in the same unit):
///   the largest such count not above the job's GPUs, else the smallest. Cost per unit on a type is
///   its price per GPU-hour ÷ (throughput per GPU × 3600). When the asked type costs more than
///   `1 + margin` times the other's, the cheapest such type is named with the saving. With
///   `require_separated`, only when the other type's slowest run is still cheaper per unit than the
///   asked type's fastest.
/// - **Poor scaling.** When the job asks more GPUs than the smallest count its configuration was
///   measured at on the asked type, the per-GPU throughput at the largest measured count not above
///   the job's, divided by the per-GPU throughput at the smallest count, is the scaling efficiency;
///   under `scaling_below` it is advice too.
#[derive(Debug, Clone, PartialEq)]
pub struct CostPerUnit {
    /// Price of one GPU-hour per GPU type.
    pub per_gpu_hour: Vec<(String, f64)>,
    /// The price of a type not listed (the `default` row).
    pub default_price: Option<f64>,
    /// Shown beside the amounts.
    pub currency: Option<String>,
    /// How much worse (a fraction: 0.1 = 10 %) the asked type must be before it is advice.
    pub margin: f64,
    /// Runs a measurement needs before it counts.
    pub min_runs: u32,
    /// Scaling efficiency under this is advice.
    pub scaling_below: Option<f64>,
    /// Name a cheaper type only when even its slowest measured run is cheaper per unit than the
    /// asked type's fastest: the runs' spread cannot explain the difference.
    pub require_separated: bool,
    /// `alert` (the default) or `deny`.
    pub action: Action,
}

fn gpus(n: impl Into<Gpus>) -> String {
    let n = n.into();
    if n.is_whole() { bursar_model::counted(u64::from(n.floor()), "GPU", "GPUs") } else { format!("{n} GPUs") }
}

/// A number for people with three significant digits (`0.0123`, `4.56`, `78.9`), or as
/// [`fmt_num`] from 100 up.
pub fn fmt_sig(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return fmt_num(v);
    }
    let mag = v.abs().log10().floor();
    if mag >= 2.0 {
        return fmt_num(v);
    }
    let decimals = (2.0 - mag).clamp(0.0, 12.0) as usize;
    format!("{v:.decimals$}")
}

/// A general rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The condition.
    pub when: Expr,
    /// What to decide.
    pub decision: RuleDecision,
    /// The reason.
    pub reason: Template,
    /// How often it may fire for one job (`once = "job"`, `cooldown = "1h"`); None: every time.
    pub once: Option<Once>,
    /// The job mark that remembers when it last fired for a job.
    pub once_key: u64,
}

/// How often a rule fires for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Once {
    /// Once per job (`once = "job"`): its first matching event, then never again for that job's run.
    Job,
    /// At most once per job per window (`cooldown = "1h"`): again only when the window has passed
    /// since it last fired.
    Window(Duration),
}

/// What a rule decides.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleDecision {
    /// Allow (with hints).
    Allow,
    /// Deny.
    Deny,
    /// Require approval.
    RequireApproval {
        /// Approvers.
        approvers: Arc<[String]>,
        /// Expiry.
        expires: Duration,
    },
    /// Defer for a while.
    Defer(Duration),
    /// Reclaim.
    Reclaim,
    /// Alert.
    Alert,
}

/// A family's settings.
#[derive(Debug, Clone, PartialEq)]
pub enum Family {
    /// `quota`
    Quota(Quota),
    /// `approval`
    Approval(Approval),
    /// `reclaim`
    Reclaim(Reclaim),
    /// `asset_reuse`
    AssetReuse(AssetReuse),
    /// `readiness`
    Readiness(Readiness),
    /// `fit`
    Fit(Fit),
    /// `trial`
    Trial(Trial),
    /// `placement`
    Placement(Placement),
    /// `efficiency`
    Efficiency(Efficiency),
    /// `rule`
    Rule(Rule),
}

/// A compiled TOML policy.
#[derive(Debug)]
pub struct TomlPolicy {
    /// Id, mode, selector, events, branches.
    pub meta: PolicyMeta,
    /// Settings.
    pub family: Family,
}

/// The sentences the families leave for later ([`Later::code`]): allow notes of an admission, and the
/// off-peak deferral.
const NOTE_QUOTA: u16 = 1;
const NOTE_TRIAL: u16 = 2;
const NOTE_PLACEMENT: u16 = 3;
const NOTE_OFF_PEAK: u16 = 4;

const IDLE_CHECK: u32 = 1;
const IDLE_RECLAIM: u32 = 2;
const MAX_RUNTIME: u32 = 3;

fn allow(out: &mut Output, note: String, branch: u16) {
    out.verdict(Verdict::new(VerdictKind::Allow(Hints::default()), note).on_branch(branch));
}

impl Policy for TomlPolicy {
    fn meta(&self) -> &PolicyMeta {
        &self.meta
    }

    fn dataset_copy(&self) -> Option<Duration> {
        match &self.family {
            Family::Placement(Placement { cross_region: Some(c), .. }) => Some(c.copy),
            _ => None,
        }
    }

    fn unnamed_approval(&self) -> bool {
        let unnamed = |a: &Action| matches!(a, Action::RequireApproval { approvers, .. } if approvers.is_empty());
        match &self.family {
            Family::Approval(a) => a.approvers.is_empty(),
            Family::Quota(q) => unnamed(&q.on_exhaust),
            Family::Trial(t) => unnamed(&t.action),
            Family::Rule(r) => {
                matches!(&r.decision, RuleDecision::RequireApproval { approvers, .. } if approvers.is_empty())
            }
            _ => false,
        }
    }

    fn evaluate(&self, cx: &Context<'_>, out: &mut Output) {
        match &self.family {
            Family::Reclaim(r) => r.on_event(cx, out),
            Family::Rule(r) => r.on_event(cx, out),
            family => {
                let Some(job) = cx.submitted() else { return };
                match family {
                    Family::Quota(q) => q.admit(job, cx, out),
                    Family::Approval(a) => a.admit(job, cx, out),
                    Family::AssetReuse(a) => a.admit(job, cx, out),
                    Family::Readiness(r) => r.admit(job, out),
                    Family::Fit(f) => f.admit(job, out),
                    Family::Trial(t) => t.admit(job, cx, out),
                    Family::Placement(p) => p.admit(job, cx, out),
                    Family::Efficiency(e) => e.admit(job, cx, out),
                    Family::Reclaim(_) | Family::Rule(_) => {}
                }
            }
        }
    }

    fn on_timer(&self, cx: &TimerContext<'_>, out: &mut Output) {
        if let Family::Reclaim(r) = &self.family {
            r.on_timer(cx, out);
        }
    }

    fn render(&self, v: &Verdict, l: &Later, job: Option<&JobSpec>, now: Timestamp, out: &mut String) {
        let Some(job) = job else { return };
        match (&self.family, l.code, &v.kind) {
            (Family::Quota(q), NOTE_QUOTA, _) => q.write_note(job, l, now, out),
            (Family::Trial(_), NOTE_TRIAL, _) => {
                out.push_str("trial of this configuration on ");
                push_gpus(out, Gpus::from_parts(l.nums[0] as u64));
                out.push_str(" GPUs succeeded at ");
                out.push_str(Timestamp(l.int).text().as_str());
            }
            (Family::Placement(_), NOTE_PLACEMENT, VerdictKind::Allow(hints)) => Placement::write_note(job, hints, out),
            (Family::Placement(Placement { off_peak: Some(op), .. }), NOTE_OFF_PEAK, VerdictKind::Defer { until }) => {
                out.push_str("deferrable work waits for off-peak hours (");
                out.push_str(&op.label);
                out.push_str("); job ");
                out.push_str(&job.id);
                out.push_str(" may start at ");
                out.push_str(until.text().as_str());
            }
            _ => {}
        }
    }

    /// A quota describes its [`QuotaLimit`]; a reclaim policy with an `[policy.idle]` table its
    /// `below`. The other families (and `rule`, whose condition cannot be read as a number) limit
    /// nothing a reader could draw.
    fn limits(&self) -> Limits {
        match &self.family {
            Family::Quota(q) => Limits { quotas: vec![q.limit.clone()], idle_below: None },
            Family::Reclaim(Reclaim { idle: Some(idle), .. }) => {
                Limits { quotas: Vec::new(), idle_below: Some(idle.below) }
            }
            _ => Limits::default(),
        }
    }

    /// An idle rule that alerted about `job` and has not been answered: the reclaim `grace` after
    /// its alert (the timer `IDLE_RECLAIM` checks the same marks when it fires).
    fn deadline(&self, job: &JobRecord) -> Option<Deadline> {
        let Family::Reclaim(r @ Reclaim { idle: Some(idle), .. }) = &self.family else { return None };
        if !Reclaim::live(job) {
            return None;
        }
        let (low_key, alert_key, _) = r.keys;
        let low = Timestamp(job.mark(low_key)?);
        let since = Timestamp(job.mark(alert_key)?);
        Some(Deadline { since, at: since.plus(idle.grace), idle_since: Some(low) })
    }
}

impl Quota {
    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        let lim = &self.limit;
        let (kind, tag_key): (ScopeKind, Option<String>) = match &lim.scope {
            QuotaScope::Project => (ScopeKind::Project, None),
            QuotaScope::User => (ScopeKind::User, None),
            QuotaScope::Tag(k) => match job.tag(k) {
                Some(v) => {
                    let mut t = String::with_capacity(k.len() + v.len() + 1);
                    t.push_str(k);
                    t.push('=');
                    t.push_str(v);
                    (ScopeKind::Tag, Some(t))
                }
                None => return,
            },
        };
        let key: &str = match (&lim.scope, &tag_key) {
            (QuotaScope::Project, _) => &job.project,
            (QuotaScope::User, _) => &job.user,
            (_, Some(t)) => t,
            (QuotaScope::Tag(_), None) => return,
        };
        let label = |s: &mut String| self.write_label(job, s);
        let ledger = cx.state.ledger(kind, key);
        let mut objections = String::new();
        let mut note: Option<Later> = None;
        let mut branch = 3;
        let object = |s: &mut String| {
            if s.is_empty() {
                // Room for the usual one or two objections, so the text is allocated once.
                s.reserve(256);
            } else {
                s.push_str("; ");
            }
        };
        if let Some(limit) = lim.gpu_hours_for(key) {
            let day = cx.now.day();
            let usage = ledger.map(|l| l.usage(lim.period, day)).unwrap_or_default();
            let current = lim.counted(&usage);
            let after = current + job.requested_gpu_hours();
            if after > limit + 1e-9 {
                branch = 0;
                object(&mut objections);
                label(&mut objections);
                objections.push_str(OVER_BUDGET);
                push_num(&mut objections, after);
                objections.push_str(" of its ");
                push_num(&mut objections, limit);
                objections.push_str(" GPU-hours for ");
                lim.period.write_label(day, &mut objections);
            } else {
                // Written only if the admission's decision quotes it (`render`).
                note = Some(Later { code: NOTE_QUOTA, nums: [after, limit], int: 0 });
            }
        }
        // An array holds the GPUs of the tasks that may run at once.
        let wants = job.concurrent_gpus();
        if let Some(max) = lim.max_gpus {
            let held = ledger.map_or(Gpus::ZERO, |l| l.held_gpus);
            if held + wants > max {
                branch = branch.min(1);
                object(&mut objections);
                label(&mut objections);
                objections.push_str(" would hold ");
                push_gpus(&mut objections, held + wants);
                objections.push_str(OVER_CONCURRENT);
                push_gpus(&mut objections, max);
                objections.push_str(" (");
                push_gpus(&mut objections, held);
                objections.push_str(" held now)");
                // An array without a throttle holds every task's GPUs; one that may run fewer at
                // once may fit (issue 55: the denial gave no hint that `%N` would admit it).
                if let Some(a) = job.array.filter(|a| a.max_running.is_none() && !job.gpus.is_zero()) {
                    let fits = u32::try_from(max.saturating_sub(held).parts() / job.gpus.parts()).unwrap_or(u32::MAX);
                    if fits >= 1 && fits < a.tasks {
                        objections.push_str("; throttled to at most ");
                        bursar_model::push_int(&mut objections, i64::from(fits));
                        objections.push_str(" tasks at once (`%");
                        bursar_model::push_int(&mut objections, i64::from(fits));
                        objections.push_str("`, e.g. `--array=0-");
                        bursar_model::push_int(&mut objections, i64::from(a.tasks.saturating_sub(1)));
                        objections.push('%');
                        bursar_model::push_int(&mut objections, i64::from(fits));
                        objections.push_str("`) it would fit this cap");
                    }
                }
            }
        }
        if let Some(q) = &job.queue
            && let Some((_, cap)) = lim.queues.iter().find(|(name, _)| name == q)
        {
            let held = ledger.map_or(Gpus::ZERO, |l| l.queue_gpus(q));
            if held + wants > *cap {
                branch = branch.min(2);
                object(&mut objections);
                label(&mut objections);
                objections.push_str(" would hold ");
                push_gpus(&mut objections, held + wants);
                objections.push_str(OVER_QUEUE);
                objections.push_str(q);
                objections.push_str(", over its cap of ");
                push_gpus(&mut objections, *cap);
            }
        }
        if objections.is_empty() {
            let note = note.map_or(Reason::NONE, Reason::Later);
            out.verdict(Verdict::new(VerdictKind::Allow(Hints::default()), note).on_branch(3));
        } else {
            self.on_exhaust.emit(out, objections, branch);
        }
    }
}

/// Writes a GPU count: an integer as [`bursar_model::push_int`] writes it, a share as `2/7`.
fn push_gpus(s: &mut String, g: Gpus) {
    if g.is_whole() {
        bursar_model::push_int(s, i64::from(g.floor()));
    } else {
        use std::fmt::Write as _;
        let _ = write!(s, "{g}");
    }
}

/// The words of a quota's objection to a GPU-hour budget ("project nlp would reach 10,250 of its
/// 10,000 GPU-hours for 2026-11"); [`quota_held_by`] reads them back.
pub const OVER_BUDGET: &str = " would reach ";
/// The words of a quota's objection to its concurrent-GPU cap (`max_gpus`).
pub const OVER_CONCURRENT: &str = " GPUs at once, over its cap of ";
/// The words of a quota's objection to a per-queue cap (`queues`).
pub const OVER_QUEUE: &str = " GPUs in queue ";

/// Which of a quota's limits a decision's reason says held the job, as labels for people: `over
/// budget` (its GPU-hours per period), `over the concurrent-GPU cap` (`max_gpus`), `over the queue
/// cap` (`queues`), in that order; empty when no quota objection is in it. A hold by a concurrent-GPU
/// cap is not "over budget" (issue 52): approving it runs the job beside the others, not past a budget.
pub fn quota_held_by(reason: &str) -> Vec<&'static str> {
    [(OVER_BUDGET, "over budget"), (OVER_CONCURRENT, "over the concurrent-GPU cap"), (OVER_QUEUE, "over the queue cap")]
        .into_iter()
        .filter(|(words, _)| reason.contains(words))
        .map(|(_, label)| label)
        .collect()
}

impl Quota {
    /// "project nlp", "user alice", "team search".
    fn write_label(&self, job: &JobSpec, s: &mut String) {
        match &self.limit.scope {
            QuotaScope::Project => {
                s.push_str("project ");
                s.push_str(&job.project);
            }
            QuotaScope::User => {
                s.push_str("user ");
                s.push_str(&job.user);
            }
            QuotaScope::Tag(k) => {
                s.push_str(k);
                s.push(' ');
                s.push_str(job.tag(k).unwrap_or(""));
            }
        }
    }

    /// "project nlp at 250 of 10,000 GPU-hours for 2026-11".
    fn write_note(&self, job: &JobSpec, l: &Later, now: Timestamp, s: &mut String) {
        s.reserve(96);
        self.write_label(job, s);
        s.push_str(" at ");
        push_num(s, l.nums[0]);
        s.push_str(" of ");
        push_num(s, l.nums[1]);
        s.push_str(" GPU-hours for ");
        self.limit.period.write_label(now.day(), s);
    }
}

impl Approval {
    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        let mut why: Vec<String> = Vec::new();
        let mut branch = None;
        if let Some(n) = self.gpus_over
            && job.concurrent_gpus() > n
        {
            why.push(format!("{} is over {n}", gpus(job.concurrent_gpus())));
            branch = branch.or(Some(0));
        }
        if let Some(h) = self.hours_over
            && job.requested_hours > h
        {
            why.push(format!("{} hours is over {}", fmt_num(job.requested_hours), fmt_num(h)));
            branch = branch.or(Some(1));
        }
        if let Some(h) = self.gpu_hours_over
            && job.requested_gpu_hours() > h
        {
            why.push(format!("{} GPU-hours is over {}", fmt_num(job.requested_gpu_hours()), fmt_num(h)));
            branch = branch.or(Some(2));
        }
        if let Some(t) = &job.gpu_type
            && self.gpu_types.iter().any(|g| g == t)
        {
            why.push(format!("GPU type {t} needs approval"));
            branch = branch.or(Some(3));
        }
        if let Some((text, cond)) = &self.when {
            let env = Env { event: cx.event, spec: Some(job), job: None, state: cx.state, now: cx.now };
            if cond.truthy(&env) {
                why.push(format!("`{text}` holds"));
                branch = branch.or(Some(4));
            }
        }
        match branch {
            Some(b) => {
                let who = if self.approvers.is_empty() {
                    String::new()
                } else {
                    format!("; approver: {}", self.approvers.join(" or "))
                };
                out.verdict(
                    Verdict::new(
                        VerdictKind::RequireApproval { approvers: self.approvers.clone(), expires_after: self.expires },
                        format!("job {} needs approval: {}{who}", job.id, why.join(", ")),
                    )
                    .on_branch(b),
                );
            }
            None => allow(out, String::new(), 5),
        }
    }
}

impl Reclaim {
    fn live(job: &JobRecord) -> bool {
        matches!(job.phase(), JobPhase::Running | JobPhase::Admitted)
    }

    /// The idle alert at `at` for a window open since `since` holding `samples` low samples, and the
    /// reclaim timer `grace` later.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site per trigger (timer, completing sample); all plain values"
    )]
    fn idle_alert(
        idle: &Idle,
        id: &Arc<str>,
        gpus_held: Gpus,
        since: Timestamp,
        at: Timestamp,
        samples: i64,
        keys: (u64, u64, u64),
        out: &mut Output,
    ) {
        let deadline = at.plus(idle.grace);
        let evidence =
            if idle.min_samples > 1 { format!("{}, {samples} samples", idle.window) } else { idle.window.to_string() };
        out.verdict(
            Verdict::new(
                VerdictKind::Alert,
                format!(
                    "job {id} has used under {}% of its {} since {since} ({evidence}); it will be reclaimed at {deadline} unless its owner sends a keepalive",
                    fmt_num(idle.below * 100.0),
                    gpus(gpus_held),
                ),
            )
            .on_branch(2),
        );
        out.effect(Effect::Mark { job_id: id.clone(), key: keys.1, value: Some(at.millis()) });
        out.effect(Effect::Timer { at: deadline, job_id: id.clone(), tag: IDLE_RECLAIM });
    }

    fn on_event(&self, cx: &Context<'_>, out: &mut Output) {
        let Some(job) = cx.job else { return };
        let Some(id) = cx.event.kind.job_id() else { return };
        let id: Arc<str> = Arc::from(id);
        let t = cx.event.time;
        // The policies see the job as it was before the event: a start or requeue of a job that had
        // ended is the scheduler running it again outside bursar.
        let rerun = matches!(cx.event.kind, EventKind::JobStarted { .. } | EventKind::JobRequeued { .. })
            && matches!(job.phase(), JobPhase::Finished | JobPhase::Reclaimed)
            && job.runs().is_none_or(|r| !r.released_unconfirmed);
        if rerun && self.on_rerun {
            out.verdict(
                Verdict::new(
                    VerdictKind::Reclaim,
                    format!(
                        "job {id} ended ({}) and the scheduler runs it again at {t} without an admission: its GPUs are reclaimed; submit it again to run it",
                        job.status().map_or(job.phase().as_str(), |s| s.as_str())
                    ),
                )
                .on_branch(5),
            );
        }
        match &cx.event.kind {
            EventKind::JobStarted { .. } => {
                if let Some(max) = self.max_runtime {
                    out.effect(Effect::Timer { at: t.plus(max), job_id: id, tag: MAX_RUNTIME });
                }
            }
            // A job set aside (moved to another id, or its reservation released as stale) holds nothing to release.
            EventKind::JobFinished { status, .. } if self.on_finish && job.phase().is_live() && !job.set_aside() => {
                out.verdict(
                    Verdict::new(
                        VerdictKind::Reclaim,
                        format!("job {id} {} at {t}: release its {} now", status.as_str(), gpus(job.gpus())),
                    )
                    .on_branch(0),
                );
            }
            EventKind::JobSample(bursar_model::Sample { gpu_util, .. }) => {
                let Some(idle) = &self.idle else { return };
                if !Self::live(job) {
                    return;
                }
                let (low_key, alert_key, count_key) = self.keys;
                let counting = idle.min_samples > 1;
                if *gpu_util < idle.below {
                    match job.mark(low_key) {
                        None => {
                            out.effect(Effect::Mark { job_id: id.clone(), key: low_key, value: Some(t.millis()) });
                            if counting {
                                out.effect(Effect::Mark { job_id: id.clone(), key: count_key, value: Some(1) });
                            }
                            out.effect(Effect::Timer { at: t.plus(idle.window), job_id: id, tag: IDLE_CHECK });
                        }
                        Some(since) if counting => {
                            let n = job.mark(count_key).unwrap_or(0).saturating_add(1);
                            out.effect(Effect::Mark { job_id: id.clone(), key: count_key, value: Some(n) });
                            // The window has run its length and was waiting for this sample.
                            let since = Timestamp(since);
                            if n >= i64::from(idle.min_samples)
                                && job.mark(alert_key).is_none()
                                && since.plus(idle.window) <= t
                            {
                                Self::idle_alert(idle, &id, job.gpus(), since, t, n, self.keys, out);
                            }
                        }
                        // The window's timer was set with the window in force when the job went
                        // idle; a reload may have shortened it since: a low sample past the window
                        // in force now alerts (issue 45), as the timer would have.
                        Some(since) if job.mark(alert_key).is_none() && Timestamp(since).plus(idle.window) <= t => {
                            let n = job.mark(count_key).unwrap_or(0);
                            Self::idle_alert(idle, &id, job.gpus(), Timestamp(since), t, n, self.keys, out);
                        }
                        Some(_) => {}
                    }
                } else if job.mark(low_key).is_some() {
                    out.effect(Effect::Mark { job_id: id.clone(), key: low_key, value: None });
                    if counting {
                        out.effect(Effect::Mark { job_id: id.clone(), key: count_key, value: None });
                    }
                    if job.mark(alert_key).is_some() {
                        out.effect(Effect::Mark { job_id: id, key: alert_key, value: None });
                    }
                }
            }
            EventKind::JobKeepalive { by, .. } => {
                let Some(idle) = &self.idle else { return };
                let (low_key, alert_key, count_key) = self.keys;
                if job.mark(low_key).is_none() {
                    return;
                }
                out.effect(Effect::Mark { job_id: id.clone(), key: alert_key, value: None });
                if idle.min_samples > 1 {
                    // The new window counts the samples after the keepalive.
                    out.effect(Effect::Mark { job_id: id.clone(), key: count_key, value: None });
                }
                out.effect(Effect::Mark { job_id: id.clone(), key: low_key, value: Some(t.millis()) });
                out.effect(Effect::Timer { at: t.plus(idle.window), job_id: id.clone(), tag: IDLE_CHECK });
                if job.mark(alert_key).is_some() {
                    out.verdict(
                        Verdict::new(
                            VerdictKind::Alert,
                            format!(
                                "keepalive from {} for job {id}: idle reclaim called off; the job is watched for another {}",
                                by.as_deref().unwrap_or("its owner"),
                                idle.window
                            ),
                        )
                        .on_branch(4),
                    );
                }
            }
            _ => {}
        }
    }

    fn on_timer(&self, cx: &TimerContext<'_>, out: &mut Output) {
        let Some(job) = cx.job else { return };
        if !Self::live(job) {
            return;
        }
        let id = cx.job_id;
        match cx.tag {
            MAX_RUNTIME => {
                if let (Some(max), Some(started)) = (self.max_runtime, job.started())
                    && started.plus(max) <= cx.at
                    && job.phase() == JobPhase::Running
                {
                    out.verdict(
                        Verdict::new(
                            VerdictKind::Reclaim,
                            format!("job {id} has run for {max} since {started}, its maximum runtime"),
                        )
                        .on_branch(1),
                    );
                }
            }
            IDLE_CHECK => {
                let Some(idle) = &self.idle else { return };
                let (low_key, alert_key, count_key) = self.keys;
                let Some(since) = job.mark(low_key).map(Timestamp) else { return };
                if since.plus(idle.window) > cx.at || job.mark(alert_key).is_some() {
                    return;
                }
                let n = job.mark(count_key).unwrap_or(0);
                if idle.min_samples > 1 && n < i64::from(idle.min_samples) {
                    return; // too few samples yet: the sample that completes them alerts
                }
                Self::idle_alert(idle, id, job.gpus(), since, cx.at, n, self.keys, out);
            }
            IDLE_RECLAIM => {
                let Some(idle) = &self.idle else { return };
                let (low_key, alert_key, _) = self.keys;
                let (Some(since), Some(alerted)) = (job.mark(low_key), job.mark(alert_key)) else { return };
                if Timestamp(alerted).plus(idle.grace) > cx.at {
                    return;
                }
                out.verdict(
                    Verdict::new(
                        VerdictKind::Reclaim,
                        format!(
                            "job {id} idle under {}% since {}; alerted at {}, no keepalive within {}",
                            fmt_num(idle.below * 100.0),
                            Timestamp(since),
                            Timestamp(alerted),
                            idle.grace
                        ),
                    )
                    .on_branch(3),
                );
            }
            _ => {}
        }
    }
}

/// The fingerprint a data-preparation job would register: the job's own `fingerprint` field if it has
/// one, else `<dataset>+<script_hash>`.
pub fn dataset_fingerprint(job: &JobSpec) -> Option<String> {
    if let Some((_, v)) = job.extra.iter().find(|(k, _)| k == "fingerprint")
        && let Ok(s) = serde_json::from_str::<String>(v.get())
    {
        return Some(s);
    }
    let (dataset, script) = (job.dataset.as_deref()?, job.script_hash.as_deref()?);
    let mut fp = String::with_capacity(dataset.len() + 1 + script.len());
    fp.push_str(dataset);
    fp.push('+');
    fp.push_str(script);
    Some(fp)
}

impl AssetReuse {
    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        let Some(stage) = job.stage.as_deref() else { return allow(out, String::new(), 2) };
        let (fp, what, branch) = if self.dataset_stages.iter().any(|s| s == stage) {
            match dataset_fingerprint(job) {
                Some(fp) => (fp, "dataset", 0),
                None => return allow(out, String::new(), 2),
            }
        } else if self.image_stages.iter().any(|s| s == stage) {
            match &job.image {
                Some(img) => (img.clone(), "image", 1),
                None => return allow(out, String::new(), 2),
            }
        } else {
            return allow(out, String::new(), 2);
        };
        match cx.state.asset(&fp) {
            Some(a) => self.action.emit(
                out,
                format!(
                    "{what} `{fp}` already exists at {} (registered by project {} at {}): reuse it instead of building it again",
                    a.uri, a.project, a.registered
                ),
                branch,
            ),
            None => allow(out, String::new(), 2),
        }
    }
}

impl Readiness {
    fn admit(&self, job: &JobSpec, out: &mut Output) {
        let mut missing: Vec<&str> = Vec::new();
        let mut branch = None;
        for (i, item) in ["image", "data", "script"].iter().enumerate() {
            if !self.require.iter().any(|r| r == item) {
                continue;
            }
            let ready = match *item {
                "image" => job.ready.image,
                "data" => job.ready.data,
                _ => job.ready.script,
            };
            if ready != Some(true) {
                missing.push(item);
                branch = branch.or(Some(i as u16));
            }
        }
        match branch {
            Some(b) => self.action.emit(
                out,
                format!(
                    "job {} is not ready: {} not declared ready; GPUs are granted only when {} are ready",
                    job.id,
                    missing.join(", "),
                    self.require.join(", ")
                ),
                b,
            ),
            None => allow(out, String::new(), 3),
        }
    }
}

impl Fit {
    fn admit(&self, job: &JobSpec, out: &mut Output) {
        use std::fmt::Write as _;
        // "job j1 does not fit: <why>; <why>", written straight into one string (writing to a String
        // cannot fail).
        let mut text = String::new();
        let mut branch = None;
        let mut why = |text: &mut String, b: u16| {
            if text.is_empty() {
                text.reserve(160);
                text.push_str("job ");
                text.push_str(&job.id);
                text.push_str(" does not fit: ");
            } else {
                text.push_str("; ");
            }
            branch = branch.or(Some(b));
        };
        if let (Some((bytes, overhead, sharded)), Some(params), Some(mem)) =
            (self.memory, job.model_params_b, job.gpu_mem_gb)
        {
            let shards = if sharded { job.gpus.as_f64().max(1.0) } else { 1.0 };
            let need = params * bytes * overhead / shards;
            if need > mem {
                why(&mut text, 0);
                text.push_str("the model needs ");
                push_num(&mut text, need);
                text.push_str(" GB per GPU (");
                push_num(&mut text, params);
                text.push_str("B parameters × ");
                push_num(&mut text, bytes);
                text.push_str(" bytes × ");
                push_f64(&mut text, overhead);
                text.push_str(" overhead / ");
                push_f64(&mut text, shards);
                text.push_str(" shard(s)) but a ");
                text.push_str(job.gpu_type.as_deref().unwrap_or("GPU"));
                text.push_str(" has ");
                push_num(&mut text, mem);
                text.push_str(" GB");
            }
        }
        if let Some(allowed) = &self.multi_node
            && job.nodes > 1
        {
            let ic = job.interconnect.as_deref();
            if !ic.is_some_and(|i| allowed.iter().any(|a| a == i)) {
                why(&mut text, 1);
                let _ = write!(text, "a {}-node job needs a fast interconnect (", job.nodes);
                push_joined(&mut text, allowed, " or ");
                text.push_str("), it has ");
                text.push_str(ic.unwrap_or("none declared"));
            }
        }
        if let Some(stage) = &job.stage
            && let Some((_, types)) = self.tiers.iter().find(|(s, _)| s == stage)
        {
            let t = job.gpu_type.as_deref().unwrap_or("none");
            if !types.iter().any(|x| x == t) {
                why(&mut text, 2);
                text.push_str("stage ");
                text.push_str(stage);
                text.push_str(" runs on ");
                push_joined(&mut text, types, " or ");
                text.push_str(", not ");
                text.push_str(t);
            }
        }
        match branch {
            Some(b) => self.action.emit(out, text, b),
            None => allow(out, String::new(), 3),
        }
    }
}

/// Appends `items` separated by `sep`, as `items.join(sep)` would, without the intermediate string.
fn push_joined(out: &mut String, items: &[String], sep: &str) {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        out.push_str(x);
    }
}

impl Trial {
    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        if job.gpus <= self.above_gpus {
            return allow(out, String::new(), 2);
        }
        let key = job.config_key();
        let last = cx.state.trial(&key).and_then(|h| h.last_success_at_most(Gpus::whole(self.trial_max_gpus)));
        let since = Timestamp(cx.now.millis().saturating_sub(self.within.millis()));
        match last {
            Some((gpus, at)) if at >= since => out.verdict(
                Verdict::new(
                    VerdictKind::Allow(Hints::default()),
                    Later { code: NOTE_TRIAL, nums: [gpus.parts() as f64, 0.0], int: at.millis() },
                )
                .on_branch(2),
            ),
            Some((trial_gpus, at)) => self.action.emit(
                out,
                format!(
                    "job {} asks {}; the last successful trial of its configuration ({} at {at}) is older than {}: run a small trial first",
                    job.id,
                    gpus(job.gpus),
                    gpus(trial_gpus),
                    self.within
                ),
                1,
            ),
            None => self.action.emit(
                out,
                format!(
                    "job {} asks {} but its configuration has no successful trial on {} or fewer in the last {}: run a small trial first",
                    job.id,
                    gpus(job.gpus),
                    gpus(self.trial_max_gpus),
                    self.within
                ),
                0,
            ),
        }
    }
}

impl OffPeak {
    fn inside(&self, tod: i64) -> bool {
        if self.start <= self.end { tod >= self.start && tod < self.end } else { tod >= self.start || tod < self.end }
    }

    /// The next start of the window at or after `now`.
    pub fn next_start(&self, now: Timestamp) -> Timestamp {
        let tod = now.time_of_day(self.offset);
        let day_ms = 86_400_000;
        let wait = (self.start - tod).rem_euclid(day_ms);
        Timestamp(now.millis() + wait)
    }
}

impl Placement {
    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        if let Some(op) = &self.off_peak {
            let deferrable = job.deferrable || job.stage.as_deref().is_some_and(|s| op.stages.iter().any(|x| x == s));
            if deferrable && !op.inside(cx.now.time_of_day(op.offset)) {
                let until = op.next_start(cx.now);
                // Written only if the decision quotes it: most deferrable submissions of a busy pool
                // are denied by another policy, and then this sentence is never read.
                let reason = Reason::Later(Later { code: NOTE_OFF_PEAK, ..Later::default() });
                out.verdict(Verdict::new(VerdictKind::Defer { until }, reason).on_branch(1));
                return;
            }
        }
        let mut hints = Hints::default();
        let mut branch = 3;
        if let Some(lane) = self.lanes.iter().find(|l| job.requested_hours <= l.max_hours) {
            hints.queue = lane.queue.clone();
            hints.priority = lane.priority;
            branch = 0;
        }
        let chosen = self.cross_region.as_ref().filter(|_| CrossRegion::untied(job)).and_then(|c| c.choose(job, cx));
        if let Some((region, why)) = chosen {
            // Written now: the sentence needs the inventory as it is at this admission.
            hints.region = Some(region);
            let mut text = String::new();
            if hints.queue.is_some() || hints.priority.is_some() {
                Placement::write_note(job, &hints, &mut text);
                text.push_str("; ");
            }
            text.push_str(&why);
            out.verdict(Verdict::new(VerdictKind::Allow(hints), Reason::Text(text)).on_branch(4));
            return;
        }
        if self.region.is_some() {
            hints.region = self.region.clone();
            if branch == 3 {
                branch = 2;
            }
        }
        // "2.5 h job goes to queue batch at priority 50", written only if the decision quotes it.
        let note = if hints.queue.is_some() || hints.priority.is_some() {
            Reason::Later(Later { code: NOTE_PLACEMENT, ..Later::default() })
        } else {
            Reason::NONE
        };
        out.verdict(Verdict::new(VerdictKind::Allow(hints), note).on_branch(branch));
    }
}

impl Placement {
    fn write_note(job: &JobSpec, hints: &Hints, note: &mut String) {
        note.reserve(48);
        push_num(note, job.requested_hours);
        note.push_str(" h job ");
        if let Some(q) = &hints.queue {
            note.push_str("goes to queue ");
            note.push_str(q);
            if hints.priority.is_some() {
                note.push_str(" at");
            }
        } else {
            note.push_str("runs at");
        }
        if let Some(p) = hints.priority {
            note.push_str(" priority ");
            bursar_model::push_int(note, p);
        }
    }
}

impl CostPerUnit {
    fn price(&self, gpu_type: &str) -> Option<f64> {
        self.per_gpu_hour.iter().find(|(t, _)| t == gpu_type).map(|(_, p)| *p).or(self.default_price)
    }

    fn money(&self, v: f64) -> String {
        let n = if v.abs() >= 1.0 { fmt_num(v) } else { fmt_sig(v) };
        match &self.currency {
            Some(c) => format!("{n} {c}"),
            None => n,
        }
    }

    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        let Some(asked) = job.gpu_type.as_deref() else { return };
        if !job.has_config() || job.gpus == 0 {
            return;
        }
        let key = job.config_key();
        let measured: Vec<&bursar_engine::state::Measured> =
            cx.state.throughput(&key).iter().filter(|m| m.runs >= self.min_runs && m.mean > 0.0).collect();
        let mine: Vec<&bursar_engine::state::Measured> =
            measured.iter().copied().filter(|m| &*m.gpu_type == asked).collect();
        if mine.is_empty() {
            return;
        }
        let label = if key.len() <= 40 { format!("`{key}`") } else { "its configuration".to_owned() };
        if let Some(p_asked) = self.price(asked) {
            self.cheaper_type(job, asked, p_asked, &label, &measured, &mine, out);
        }
        if let Some(below) = self.scaling_below {
            self.scaling(job, asked, below, &label, &mine, out);
        }
    }

    /// Cost per 1,000 units on a type: price per GPU-hour ÷ (throughput per GPU × 3600) × 1000.
    fn per_1k(price: f64, per_gpu: f64) -> f64 {
        price / (per_gpu * 3600.0) * 1000.0
    }

    #[expect(clippy::too_many_arguments, reason = "one call site; the pieces of one admission")]
    fn cheaper_type(
        &self,
        job: &JobSpec,
        asked: &str,
        p_asked: f64,
        label: &str,
        measured: &[&bursar_engine::state::Measured],
        mine: &[&bursar_engine::state::Measured],
        out: &mut Output,
    ) {
        let others: std::collections::BTreeSet<&str> =
            measured.iter().map(|m| &*m.gpu_type).filter(|t| *t != asked).collect();
        // (other type, count, unit, cost here, cost there, runs here, runs there)
        let mut best: Option<(&str, Gpus, &str, f64, f64, u32, u32)> = None;
        for other in others {
            let Some(p_other) = self.price(other) else { continue };
            let theirs = |g: Gpus, unit: &str| {
                measured.iter().find(|m| &*m.gpu_type == other && m.gpus == g && &*m.unit == unit)
            };
            let common: Vec<(&bursar_engine::state::Measured, &bursar_engine::state::Measured)> =
                mine.iter().filter_map(|m| theirs(m.gpus, &m.unit).map(|t| (*m, *t))).collect();
            let at = common
                .iter()
                .filter(|(m, _)| m.gpus <= job.gpus)
                .max_by_key(|(m, _)| m.gpus)
                .or_else(|| common.iter().min_by_key(|(m, _)| m.gpus));
            let Some((m, t)) = at else { continue };
            let here = Self::per_1k(p_asked, m.mean);
            let there = Self::per_1k(p_other, t.mean);
            let separated = t.min > 0.0 && Self::per_1k(p_other, t.min) < Self::per_1k(p_asked, m.max);
            if here > there * (1.0 + self.margin)
                && (!self.require_separated || separated)
                && best.is_none_or(|b| there / here < b.4 / b.3)
            {
                best = Some((other, m.gpus, &m.unit, here, there, m.runs, t.runs));
            }
        }
        let Some((other, g, unit, here, there, n_here, n_there)) = best else { return };
        let saving = 1.0 - there / here;
        let requested = job.gpus.as_f64() * job.requested_hours;
        let money = if requested > 0.0 {
            let cost = requested * p_asked;
            format!(
                "; about {} of the {} its {} requested GPU-hours cost on {asked}",
                self.money(cost * saving),
                self.money(cost),
                fmt_num(requested)
            )
        } else {
            String::new()
        };
        let runs = |n: u32| if n == 1 { "1 run".to_owned() } else { format!("{n} runs") };
        self.action.emit(
            out,
            format!(
                "job {} asks for {asked} for configuration {label}, but measured at {} {other} costs {:.0}% less per unit of work: {} per 1k {unit} on {other} ({}) against {} on {asked} ({}){money}",
                job.id,
                gpus(g),
                saving * 100.0,
                self.money(there),
                runs(n_there),
                self.money(here),
                runs(n_here),
            ),
            3,
        );
    }

    fn scaling(
        &self,
        job: &JobSpec,
        asked: &str,
        below: f64,
        label: &str,
        mine: &[&bursar_engine::state::Measured],
        out: &mut Output,
    ) {
        let Some(base) = mine.iter().min_by_key(|m| m.gpus) else { return };
        if job.gpus <= base.gpus {
            return;
        }
        let Some(at) = mine
            .iter()
            .filter(|m| m.unit == base.unit && m.gpus > base.gpus && m.gpus <= job.gpus)
            .max_by_key(|m| m.gpus)
        else {
            return;
        };
        let eff = at.mean / base.mean;
        if eff >= below {
            return;
        }
        self.action.emit(
            out,
            format!(
                "job {} asks {} {asked} GPUs for configuration {label}, whose measured throughput per GPU at {} is {:.0}% of that at {} (under {:.0}%): the same work on fewer GPUs costs less",
                job.id,
                job.gpus,
                gpus(at.gpus),
                eff * 100.0,
                gpus(base.gpus),
                below * 100.0
            ),
            4,
        );
    }
}

impl Efficiency {
    fn admit(&self, job: &JobSpec, cx: &Context<'_>, out: &mut Output) {
        if self.mixed_precision && job.mixed_precision == Some(false) {
            out.verdict(
                Verdict::new(
                    VerdictKind::Alert,
                    format!(
                        "job {} runs without mixed precision: bf16/fp16 usually halves memory and speeds up training",
                        job.id
                    ),
                )
                .on_branch(0),
            );
        }
        if let (Some(min), Some(b)) = (self.min_batch_size, job.batch_size)
            && b < min
        {
            out.verdict(
                Verdict::new(
                    VerdictKind::Alert,
                    format!("job {} uses a batch size of {b} per GPU (under {min}): the GPUs will mostly wait", job.id),
                )
                .on_branch(1),
            );
        }
        if self.dataloader_workers && job.dataloader_workers == Some(0) {
            out.verdict(
                Verdict::new(
                    VerdictKind::Alert,
                    format!(
                        "job {} loads data in the training process (0 workers): use background data loader workers",
                        job.id
                    ),
                )
                .on_branch(2),
            );
        }
        if let Some(c) = &self.cost_per_unit {
            c.admit(job, cx, out);
        }
    }
}

impl Rule {
    fn on_event(&self, cx: &Context<'_>, out: &mut Output) {
        let env = Env { event: cx.event, spec: cx.submitted(), job: cx.job, state: cx.state, now: cx.now };
        if !self.when.truthy(&env) {
            if cx.submitted().is_some() {
                allow(out, String::new(), 1);
            }
            return;
        }
        // Once per job, or per job per window: the job's mark says when the rule last fired for it.
        // An event without a job record (a submission, a tick) has nothing to remember it by.
        if let (Some(once), Some(job), Some(id)) = (self.once, cx.job, cx.event.kind.job_id()) {
            if let Some(last) = job.mark(self.once_key) {
                let again = match once {
                    Once::Job => false,
                    Once::Window(w) => Timestamp(last).plus(w) <= cx.now,
                };
                if !again {
                    return;
                }
            }
            out.effect(Effect::Mark { job_id: Arc::from(id), key: self.once_key, value: Some(cx.now.millis()) });
        }
        let reason = self.reason.render(&env);
        let kind = match &self.decision {
            RuleDecision::Allow => VerdictKind::Allow(Hints::default()),
            RuleDecision::Deny => VerdictKind::Deny,
            RuleDecision::RequireApproval { approvers, expires } => {
                VerdictKind::RequireApproval { approvers: approvers.clone(), expires_after: *expires }
            }
            RuleDecision::Defer(d) => VerdictKind::Defer { until: cx.now.plus(*d) },
            RuleDecision::Reclaim => VerdictKind::Reclaim,
            RuleDecision::Alert => VerdictKind::Alert,
        };
        out.verdict(Verdict::new(kind, reason).on_branch(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_says_which_of_a_quotas_limits_held_it() {
        // The reasons quotas write (tests/cases/quota-max-concurrent-gpus and a budget case).
        let cap = "project nlp would hold 20 GPUs at once, over its cap of 16 (16 held now)";
        let budget = "project nlp would reach 32 of its 10 GPU-hours for 2026-11";
        let queue = "project nlp would hold 20 GPUs in queue short, over its cap of 16";
        assert_eq!(quota_held_by(cap), ["over the concurrent-GPU cap"]);
        assert_eq!(quota_held_by(budget), ["over budget"]);
        assert_eq!(quota_held_by(queue), ["over the queue cap"]);
        assert_eq!(quota_held_by(&format!("{budget}; {cap}")), ["over budget", "over the concurrent-GPU cap"]);
        assert!(quota_held_by("needs a person's yes: more than 64 GPUs").is_empty());
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(fmt_num(10250.0), "10,250");
        assert_eq!(fmt_num(12.5), "12.5");
        assert_eq!(fmt_num(999.0), "999");
        assert_eq!(fmt_num(1_000_000.04), "1,000,000");
        assert_eq!(fmt_num(-1500.0), "-1,500");
        assert_eq!(fmt_num(1_002_003.0), "1,002,003");
        assert_eq!(fmt_num(0.04), "0");
        assert_eq!(fmt_num(2240.56), "2,240.6");
    }

    fn display(v: f64) -> String {
        let mut s = String::new();
        push_f64(&mut s, v);
        s
    }

    #[test]
    fn a_float_is_written_as_display_writes_it() {
        for v in [
            0.0,
            -0.0,
            1.0,
            8.0,
            -3.0,
            1.2,
            1.25,
            0.125,
            0.1 + 0.2,
            1e-7,
            999_999.999_999,
            1e6,
            1e300,
            2.5e-320,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            123_456.5,
            -0.5,
            0.000_001,
            0.000_000_5,
        ] {
            assert_eq!(display(v), format!("{v}"), "{v:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_float_is_written_as_display_writes_it(bits in proptest::prelude::any::<u64>()) {
            let v = f64::from_bits(bits);
            proptest::prop_assert_eq!(display(v), format!("{v}"));
        }

        #[test]
        fn short_decimals_are_written_as_display_writes_them(m in -2_000_000_000_000i64..2_000_000_000_000, k in 0u32..9) {
            let v = m as f64 / 10f64.powi(k as i32);
            proptest::prop_assert_eq!(display(v), format!("{v}"));
        }
    }

    #[test]
    fn off_peak_next_start() {
        let op = OffPeak {
            start: 22 * 3_600_000,
            end: 6 * 3_600_000,
            offset: Duration::hours(8),
            label: "22:00-06:00 +08:00".into(),
            stages: vec![],
        };
        // 09:00Z is 17:00 local: next start is 22:00 local = 14:00Z.
        let now = Timestamp::parse("2026-11-02T09:00:00Z").unwrap();
        assert!(!op.inside(now.time_of_day(op.offset)));
        assert_eq!(op.next_start(now).to_string(), "2026-11-02T14:00:00Z");
        // 23:00 local is inside.
        let late = Timestamp::parse("2026-11-02T15:00:00Z").unwrap();
        assert!(op.inside(late.time_of_day(op.offset)));
    }
}
