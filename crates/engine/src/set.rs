//! A policy set: the compiled policies in force, immutable, swapped whole on reload.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use bursar_model::{JobSpec, Period};

use crate::policy::{Limits, Mode, Policy, QuotaLimit, Selector};
use crate::state::ScopeKind;

/// A file a policy set was loaded from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// Path as given to the loader.
    pub path: String,
    /// SHA-256 of its content, hex.
    pub digest: String,
}

/// The WebAssembly component a policy runs: its bytes are in the set's digest, so replacing the
/// `.wasm` is a change of set (the log names the code that decided), and `/v1/policies` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guest {
    /// The policy.
    pub policy: String,
    /// The component file, as its manifest resolves it.
    pub path: String,
    /// SHA-256 of the bytes compiled, hex.
    pub digest: String,
}

/// Where a tag's value comes from ([`TagSource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagFrom {
    /// Looked up by the job's project (on Slurm: its account).
    Project,
    /// Looked up by the job's queue (on Slurm: its partition).
    Queue,
    /// Looked up by the job's user.
    User,
    /// What the submission says, as sent: the submitter chooses it. Only for tags that carry no
    /// budget anyone else depends on, or a scheduler that sets them itself.
    Submitter,
}

impl TagFrom {
    /// The name in a policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            TagFrom::Project => "project",
            TagFrom::Queue => "queue",
            TagFrom::User => "user",
            TagFrom::Submitter => "submitter",
        }
    }
}

/// Where the value of one tag comes from (a `[[tag]]` table of a policy file): a job's tag that a
/// quota counts by (`scope = "tag:team"`) decides whose budget the job spends, so it must not be
/// whatever the submitter wrote in `--comment`. With a source other than [`TagFrom::Submitter`], the
/// engine replaces the submitted value by the mapped one before any policy sees the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagSource {
    /// The tag's key (`team`).
    pub key: String,
    /// What its value is looked up by.
    pub from: TagFrom,
    /// The value for each project (queue, user).
    pub map: std::collections::BTreeMap<String, String>,
    /// The value for a project (queue, user) the map does not name; without it such a job has no
    /// such tag.
    pub default: Option<String>,
    /// Where it was declared (`file:line:col`).
    pub source: String,
}

impl TagSource {
    /// The tag's value for `spec`: mapped, or as submitted for [`TagFrom::Submitter`].
    pub fn value<'a>(&'a self, spec: &'a JobSpec) -> Option<&'a str> {
        let by = match self.from {
            TagFrom::Submitter => return spec.tag(&self.key),
            TagFrom::Project => Some(spec.project.as_str()),
            TagFrom::Queue => spec.queue.as_deref(),
            TagFrom::User => Some(spec.user.as_str()),
        };
        by.and_then(|b| self.map.get(b)).or(self.default.as_ref()).map(String::as_str)
    }

    /// Replaces the tag of `spec` by its trusted value (or removes it when there is none).
    pub fn apply(&self, spec: &mut JobSpec) {
        if self.from == TagFrom::Submitter {
            return;
        }
        let value = self.value(spec).map(str::to_owned);
        spec.tags.retain(|(k, _)| k != &self.key);
        if let Some(v) = value {
            spec.tags.push((self.key.clone(), v));
        }
    }
}

/// Why policies cannot form a set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    /// Two policies share an id.
    #[error("policy id `{id}` is defined twice: in {first} and in {second}")]
    DuplicateId {
        /// The id.
        id: String,
        /// Where it was first defined.
        first: String,
        /// Where it was defined again.
        second: String,
    },
    /// Two `[[tag]]` tables name the same tag.
    #[error("tag `{key}` is given a source twice: in {first} and in {second}")]
    DuplicateTag {
        /// The tag.
        key: String,
        /// Where it was first declared.
        first: String,
        /// Where it was declared again.
        second: String,
    },
}

/// What one policy of a set limits ([`Policy::limits`]), with the id, mode and selector that decide
/// where and whether it applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyLimits {
    /// The policy's id.
    pub policy: String,
    /// Enforced or dry-run.
    pub mode: Mode,
    /// Which jobs it applies to.
    #[serde(default, skip_serializing_if = "Selector::is_empty")]
    pub selector: Selector,
    /// What it limits.
    pub limits: Limits,
}

impl PolicyLimits {
    /// Whether this policy may check jobs whose ledger of kind `kind` is `name` (a quota whose
    /// selector names projects applies to those projects' ledgers only; see [`PoolLimits`]).
    pub fn applies_to(&self, kind: ScopeKind, name: &str) -> bool {
        may_apply(&self.selector, kind, name)
    }
}

/// What the policies of a set limit, and the rules that fold them into the numbers a reader wants.
/// Plain data (serialisable), so a reader can keep the description of the set it ran with — the
/// report stores it beside its facts — and apply the same rules later without the policies.
///
/// The rules follow the engine's semantics:
/// - **Dry-run policies define nothing**: they never change a decision.
/// - **Budgets: the lowest applies.** A job must pass every enforced quota, so the GPU-hours a ledger
///   may use in a period is the lowest [`QuotaLimit::gpu_hours_for`] over the enforced quotas of that
///   scope and period that may apply to it. A quota whose selector names projects (users) applies to
///   those projects' (users') ledgers only, and one that requires a tag value to that tag's ledger
///   only; its other selector fields (queues, stages, GPU types) choose which of the ledger's jobs it
///   checks, not whose usage it counts, so its budget still stands for the ledger.
/// - **Idle threshold: the highest applies.** A job is reclaimed when any enforced idle rule finds it
///   idle, so utilisation under the highest `below` is idle in the engine's eyes. Only rules that
///   apply to every job (an empty selector) count: one threshold stands for the whole pool, and a
///   rule for some projects must not decide what is idle for all of them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PoolLimits {
    /// Every policy that limits something, in load order.
    pub policies: Vec<PolicyLimits>,
}

impl PoolLimits {
    /// The description of `policies`: those that limit something, with their mode and selector.
    pub fn of(policies: &[Arc<dyn Policy>]) -> PoolLimits {
        let policies = policies
            .iter()
            .filter_map(|p| {
                let limits = p.limits();
                let meta = p.meta();
                (!limits.is_empty()).then(|| PolicyLimits {
                    policy: meta.id.to_string(),
                    mode: meta.mode,
                    selector: meta.selector.clone(),
                    limits,
                })
            })
            .collect();
        PoolLimits { policies }
    }

    /// The enforced policies' limits.
    pub fn enforced(&self) -> impl Iterator<Item = &PolicyLimits> {
        self.policies.iter().filter(|p| p.mode == Mode::Enforce)
    }

    /// Every enforced quota, with the policy that enforces it (for a pool page: one line per quota
    /// and ledger, used + reserved against [`QuotaLimit::gpu_hours_for`]).
    pub fn quotas(&self) -> impl Iterator<Item = (&PolicyLimits, &QuotaLimit)> {
        self.enforced().flat_map(|p| p.limits.quotas.iter().map(move |q| (p, q)))
    }

    /// The GPU-hours the ledger `name` of kind `kind` may use per `period` (lowest of the enforced
    /// quotas that apply to it; see the type's docs), if any quota limits it.
    pub fn gpu_hours(&self, kind: ScopeKind, name: &str, period: Period) -> Option<f64> {
        self.quotas()
            .filter(|(p, q)| q.period == period && q.scope.counts(kind, name) && may_apply(&p.selector, kind, name))
            .filter_map(|(_, q)| q.gpu_hours_for(name))
            .reduce(f64::min)
    }

    /// The utilisation under which the enforced idle rules that apply to every job call a job idle
    /// (the highest of their `below`; see the type's docs), if there is such a rule.
    pub fn idle_below(&self) -> Option<f64> {
        self.enforced().filter(|p| p.selector.is_empty()).filter_map(|p| p.limits.idle_below).reduce(f64::max)
    }
}

/// Whether a policy with `selector` may check jobs whose ledger of kind `kind` is `name`.
fn may_apply(selector: &Selector, kind: ScopeKind, name: &str) -> bool {
    match kind {
        ScopeKind::Project => selector.projects.is_empty() || selector.projects.iter().any(|p| p == name),
        ScopeKind::User => selector.users.is_empty() || selector.users.iter().any(|u| u == name),
        ScopeKind::Tag => {
            let Some((key, value)) = name.split_once('=') else { return true };
            selector.tags.iter().all(|(k, v)| k != key || v == value)
        }
    }
}

/// The policies in force, indexed by the event types they want and by whether their selector selects
/// every job.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: Vec<Arc<dyn Policy>>,
    by_type: [Vec<usize>; bursar_model::EVENT_TYPES.len()],
    /// By policy: its selector is empty, so no job needs to be matched against it.
    selects_all: Vec<bool>,
    by_id: FxHashMap<Arc<str>, usize>,
    files: Vec<SourceFile>,
    guests: Vec<Guest>,
    digest: String,
    limits: PoolLimits,
    tags: Vec<TagSource>,
    /// Some tag source replaces submitted values.
    rewrites_tags: bool,
    /// By policy: it enforces a quota scoped by user or tag, whose ledger collects the usage of
    /// several projects ([`PolicySet::spans`]).
    spans: Vec<bool>,
    /// Some policy reads the run history of configurations (trial-before-scale, or a WebAssembly
    /// component, which may).
    reads_runs: bool,
}

impl PolicySet {
    /// Builds a set. `digest` identifies the set (the loader hashes the files); `files` lists them.
    pub fn new(policies: Vec<Arc<dyn Policy>>, files: Vec<SourceFile>, digest: String) -> Result<PolicySet, SetError> {
        let mut by_id: FxHashMap<Arc<str>, usize> = FxHashMap::default();
        let mut by_type: [Vec<usize>; bursar_model::EVENT_TYPES.len()] = Default::default();
        for (i, p) in policies.iter().enumerate() {
            let meta = p.meta();
            if let Some(&j) = by_id.get(&meta.id) {
                return Err(SetError::DuplicateId {
                    id: meta.id.to_string(),
                    first: policies[j].meta().source.clone(),
                    second: meta.source.clone(),
                });
            }
            by_id.insert(meta.id.clone(), i);
            for (t, list) in by_type.iter_mut().enumerate() {
                if meta.events.0 & (1 << t) != 0 {
                    list.push(i);
                }
            }
        }
        let limits = PoolLimits::of(&policies);
        let selects_all = policies.iter().map(|p| p.meta().selector.is_empty()).collect();
        let spans = policies
            .iter()
            .map(|p| p.limits().quotas.iter().any(|q| q.scope != crate::policy::QuotaScope::Project))
            .collect();
        let reads_runs = policies.iter().any(|p| matches!(p.meta().kind, "trial" | "wasm"));
        Ok(PolicySet {
            policies,
            by_type,
            selects_all,
            by_id,
            files,
            guests: Vec::new(),
            digest,
            limits,
            tags: Vec::new(),
            rewrites_tags: false,
            spans,
            reads_runs,
        })
    }

    /// The set with the WebAssembly components its policies run (whose bytes its digest covers).
    pub fn with_guests(mut self, guests: Vec<Guest>) -> PolicySet {
        self.guests = guests;
        self
    }

    /// The WebAssembly components its policies run, with the digest of their bytes.
    pub fn guests(&self) -> &[Guest] {
        &self.guests
    }

    /// The set with these tag sources (the `[[tag]]` tables of its files).
    pub fn with_tags(mut self, tags: Vec<TagSource>) -> Result<PolicySet, SetError> {
        for (i, t) in tags.iter().enumerate() {
            if let Some(first) = tags[..i].iter().find(|u| u.key == t.key) {
                return Err(SetError::DuplicateTag {
                    key: t.key.clone(),
                    first: first.source.clone(),
                    second: t.source.clone(),
                });
            }
        }
        self.rewrites_tags = tags.iter().any(|t| t.from != TagFrom::Submitter);
        self.tags = tags;
        Ok(self)
    }

    /// Where each declared tag comes from.
    pub fn tag_sources(&self) -> &[TagSource] {
        &self.tags
    }

    /// Whether some tag's submitted value is replaced ([`PolicySet::trust_tags`] changes something).
    pub fn rewrites_tags(&self) -> bool {
        self.rewrites_tags
    }

    /// Replaces every declared tag of `spec` by its trusted value.
    pub fn trust_tags(&self, spec: &mut JobSpec) {
        for t in &self.tags {
            t.apply(spec);
        }
    }

    /// An empty set.
    pub fn empty() -> PolicySet {
        PolicySet::default()
    }

    /// How long copying a dataset to another region takes, as the first policy that places jobs
    /// across regions says ([`Policy::dataset_copy`]); `None` when none does.
    pub fn dataset_copy(&self) -> Option<bursar_model::Duration> {
        self.policies.iter().find_map(|p| p.dataset_copy())
    }

    /// All policies, in load order.
    pub fn policies(&self) -> &[Arc<dyn Policy>] {
        &self.policies
    }

    /// Indices of the policies that want event type `index` (see [`crate::EventMask::index`]).
    pub fn for_type(&self, index: usize) -> &[usize] {
        self.by_type.get(index).map_or(&[], Vec::as_slice)
    }

    /// Whether policy `i` applies to every job (its selector is empty): then its selector need not be
    /// asked.
    pub fn selects_all(&self, i: usize) -> bool {
        self.selects_all.get(i).copied().unwrap_or(false)
    }

    /// The position of the policy with id `id`.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// The policy with id `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn Policy>> {
        self.by_id.get(id).and_then(|&i| self.policies.get(i))
    }

    /// Whether policy `i` enforces a quota scoped by user or tag: its ledger collects the usage of
    /// several projects, so in a partitioned deployment (`serve --cluster`) it is checked where
    /// every project's usage meets ([`crate::shared`]), not in the project's partition.
    pub fn spans(&self, i: usize) -> bool {
        self.spans.get(i).copied().unwrap_or(false)
    }

    /// Whether some policy's quota spans projects ([`PolicySet::spans`]).
    pub fn has_spanning(&self) -> bool {
        self.spans.iter().any(|s| *s)
    }

    /// Whether some policy may read the run history of configurations: a trial-before-scale policy,
    /// or a WebAssembly component (whose host interface offers it). When none does, a partitioned
    /// deployment need not send the runs it sees finish to the other partitions.
    pub fn reads_runs(&self) -> bool {
        self.reads_runs
    }

    /// What the set's policies limit (quotas, idle thresholds), read once when the set was built.
    pub fn limits(&self) -> &PoolLimits {
        &self.limits
    }

    /// The files the set came from.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// The set's digest.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// True when the set has no policy.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}
