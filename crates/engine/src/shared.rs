//! Ledgers that span projects (user and tag budgets) when projects live in different partitions:
//! the two-step reservation of `docs/architecture.md`, as `serve --cluster` runs it.
//!
//! One engine keeps every ledger in one state, so a user quota sees the user's usage in every
//! project. Partitioned by project, each partition would see only its own projects' share and the
//! quota could be overshot. So one partition — the *ledger partition* — keeps the user and tag
//! ledgers of the whole cluster, and every project partition consults it:
//!
//! 1. **The project's partition decides first.** Its engine evaluates every policy except the
//!    quotas that span projects ([`crate::PolicySet::spans`]), and combines their enforced verdicts
//!    into its *local* verdict (deny, require approval, defer or allow).
//! 2. **The ledger partition reserves, and can refuse.** The project's engine sends the job and its
//!    local verdict ([`LedgerChange::Admit`]) through its [`LedgerClient`], and waits. The ledger
//!    partition's engine evaluates the spanning quotas against the shared ledgers, combines their
//!    verdicts with the local one by the engine's own rule (any deny wins, then approval, then
//!    defer, else allow), and — only if that decision admits — reserves, exactly as one engine would.
//!    It answers with the spanning quotas' verdicts ([`LedgerAnswer`]).
//! 3. **The project's partition decides the same.** It puts those verdicts among its own, in policy
//!    order, and combines them as always: the same decision, the same policies named, the same
//!    sentence as one engine on the same stream.
//!
//! Because the ledger partition applies every check and every reservation one at a time, in the
//! order they arrive, no two admissions can both take the last GPU-hours of a user's budget: the
//! ledger partition is the one writer of every spanning ledger. Afterwards, each change the project's
//! partition makes to a job admitted this way (a granted approval reserves, a start, a release that
//! settles from runtime, a billing charge, a rejection or expiry, forgetting it) is sent as a
//! [`LedgerOp`] too, in order and before the project's partition journals it, so the shared ledgers
//! follow the same arithmetic on the same record ([`crate::state::State`]'s own `reserve`,
//! `start`, `release`, `charge`).
//!
//! Everything here is deterministic: the ledger partition's answer to an op is a pure function of
//! the ops before it, and an op resent after a failover (same id) gets the first answer, which the
//! ledger partition remembers. The project's partition journals the answer beside the submission,
//! so its replay after a takeover uses it without asking again.
//!
//! Single-node bursar never sets a client: the spanning quotas are then evaluated in place, as
//! always.

use std::collections::VecDeque;
use std::sync::Arc;

use bursar_model::{DecisionKind, Duration, Hints, LedgerChange, Timestamp};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::policy::{Later, Reason, Verdict, VerdictKind};

/// Answers a ledger partition remembers, to answer a resent admission with its first answer.
pub const ANSWERS_KEPT: usize = 50_000;

/// How a project partition's engine reaches the ledger partition.
pub trait LedgerClient: Send + std::fmt::Debug {
    /// The spanning quotas' verdicts for a submission ([`LedgerChange::Admit`]), once the ledger
    /// partition has reserved (or not). Every op given to [`LedgerClient::settle`] before is applied
    /// there first. Blocks until it answers; an error means no answer can be had now, and the engine
    /// then makes no decision ([`crate::Engine::ledger_failure`]).
    fn admit(&mut self, op: bursar_model::LedgerOp) -> Result<LedgerAnswer, String>;

    /// A change to a job admitted through the ledger partition, in order. It may be held until the
    /// next [`LedgerClient::admit`], or until its owner syncs before journaling.
    fn settle(&mut self, op: bursar_model::LedgerOp);
}

/// What the ledger partition answers for a submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerAnswer {
    /// The decision it combined (and reserved for, when it admits).
    pub kind: DecisionKind,
    /// The verdicts of the spanning quotas, by policy, in policy order.
    pub verdicts: Vec<SharedVerdicts>,
}

/// One spanning policy's verdicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedVerdicts {
    /// The policy.
    pub policy: String,
    /// Its verdicts.
    pub verdicts: Vec<SharedVerdict>,
}

/// A verdict as it travels between partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedVerdict {
    /// What it asks for.
    pub kind: SharedKind,
    /// Its sentence, or the numbers to write it from.
    pub reason: SharedReason,
    /// GPU-hours it gives, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<f64>,
    /// The branch that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<u16>,
}

/// [`VerdictKind`] on the wire (placement hints are not carried: no quota gives any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SharedKind {
    /// Allow.
    Allow,
    /// Deny.
    Deny,
    /// Require approval.
    RequireApproval {
        /// Who may approve.
        approvers: Vec<String>,
        /// How long the request stays open.
        expires_after: Duration,
    },
    /// Defer.
    Defer {
        /// Until when.
        until: Timestamp,
    },
    /// Reclaim.
    Reclaim,
    /// Alert.
    Alert,
}

/// [`Reason`] on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SharedReason {
    /// The sentence.
    Text(String),
    /// The numbers of a sentence the policy writes when asked ([`Later`]).
    Later {
        /// Which sentence.
        code: u16,
        /// Its numbers.
        nums: [f64; 2],
        /// Its integer.
        int: i64,
    },
}

impl SharedVerdict {
    /// The wire form of `v`.
    pub fn of(v: &Verdict) -> SharedVerdict {
        let kind = match &v.kind {
            VerdictKind::Allow(_) => SharedKind::Allow,
            VerdictKind::Deny => SharedKind::Deny,
            VerdictKind::RequireApproval { approvers, expires_after } => {
                SharedKind::RequireApproval { approvers: approvers.to_vec(), expires_after: *expires_after }
            }
            VerdictKind::Defer { until } => SharedKind::Defer { until: *until },
            VerdictKind::Reclaim => SharedKind::Reclaim,
            VerdictKind::Alert => SharedKind::Alert,
        };
        let reason = match &v.reason {
            Reason::Text(t) => SharedReason::Text(t.clone()),
            Reason::Later(l) => SharedReason::Later { code: l.code, nums: l.nums, int: l.int },
        };
        SharedVerdict { kind, reason, gpu_hours: v.gpu_hours, branch: v.branch }
    }

    /// The verdict again.
    pub fn verdict(&self) -> Verdict {
        let kind = match &self.kind {
            SharedKind::Allow => VerdictKind::Allow(Hints::default()),
            SharedKind::Deny => VerdictKind::Deny,
            SharedKind::RequireApproval { approvers, expires_after } => VerdictKind::RequireApproval {
                approvers: Arc::from(approvers.clone().into_boxed_slice()),
                expires_after: *expires_after,
            },
            SharedKind::Defer { until } => VerdictKind::Defer { until: *until },
            SharedKind::Reclaim => VerdictKind::Reclaim,
            SharedKind::Alert => VerdictKind::Alert,
        };
        let reason = match &self.reason {
            SharedReason::Text(t) => Reason::Text(t.clone()),
            SharedReason::Later { code, nums, int } => Reason::Later(Later { code: *code, nums: *nums, int: *int }),
        };
        Verdict { kind, job_id: None, reason, gpu_hours: self.gpu_hours, branch: self.branch }
    }
}

/// The rank of an admission's outcome in the engine's combination rule (any deny wins; then
/// require-approval; then defer; else allow); `None` for the kinds that do not decide admissions.
pub fn rank(k: DecisionKind) -> Option<usize> {
    match k {
        DecisionKind::Allow => Some(0),
        DecisionKind::Defer => Some(1),
        DecisionKind::RequireApproval => Some(2),
        DecisionKind::Deny => Some(3),
        _ => None,
    }
}

/// The admission outcome of a rank.
pub fn of_rank(r: usize) -> DecisionKind {
    [DecisionKind::Allow, DecisionKind::Defer, DecisionKind::RequireApproval, DecisionKind::Deny]
        .get(r)
        .copied()
        .unwrap_or(DecisionKind::Deny)
}

/// What an engine keeps about the shared ledgers, in its snapshot.
///
/// In a project partition: the jobs admitted through the ledger partition, whose later changes it
/// must send. In the ledger partition: the answers it gave, to answer a resend the same.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Shared {
    /// Jobs admitted through the ledger partition (project partitions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tracked: Vec<Arc<str>>,
    /// Answers given, oldest first (the ledger partition).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    answers: VecDeque<(String, LedgerAnswer)>,
    #[serde(skip)]
    index: Option<Index>,
}

#[derive(Debug, Clone, Default)]
struct Index {
    tracked: rustc_hash::FxHashSet<Arc<str>>,
    answers: FxHashMap<String, usize>,
    /// Answers dropped from the front of `answers` since the index was built.
    dropped: usize,
}

impl Shared {
    fn index(&mut self) -> &mut Index {
        let (tracked, answers) = (&self.tracked, &self.answers);
        self.index.get_or_insert_with(|| Index {
            tracked: tracked.iter().cloned().collect(),
            answers: answers.iter().enumerate().map(|(i, (id, _))| (id.clone(), i)).collect(),
            dropped: 0,
        })
    }

    /// Whether job `id`'s changes go to the ledger partition.
    pub fn tracks(&mut self, id: &str) -> bool {
        !self.tracked.is_empty() && self.index().tracked.contains(id)
    }

    /// Job `id` was admitted through the ledger partition.
    pub fn track(&mut self, id: &Arc<str>) {
        if self.index().tracked.insert(id.clone()) {
            self.tracked.push(id.clone());
        }
    }

    /// Job `id` is gone.
    pub fn untrack(&mut self, id: &str) {
        if self.tracked.is_empty() {
            return;
        }
        if self.index().tracked.remove(id) {
            self.tracked.retain(|t| &**t != id);
        }
    }

    /// Remembers the answer to op `id`.
    pub fn remember(&mut self, id: &str, answer: LedgerAnswer) {
        let index = self.index();
        let at = index.dropped + index.answers.len();
        if index.answers.insert(id.to_owned(), at).is_some() {
            return;
        }
        self.answers.push_back((id.to_owned(), answer));
        while self.answers.len() > ANSWERS_KEPT {
            if let Some((old, _)) = self.answers.pop_front() {
                let index = self.index();
                index.answers.remove(&old);
                index.dropped += 1;
            }
        }
    }

    /// The answer given to op `id`, if still remembered.
    pub fn answer(&mut self, id: &str) -> Option<&LedgerAnswer> {
        let index = self.index();
        let at = index.answers.get(id)?.checked_sub(index.dropped)?;
        self.answers.get(at).map(|(_, a)| a)
    }
}

/// The op id of a change caused by input `cause` to job `job`: derived, so that the same input
/// applied again (a failover) sends the same op, which the ledger partition applies once.
pub fn op_id(cause: &str, job: &str, change: &LedgerChange) -> String {
    let kind = match change {
        LedgerChange::Admit { .. } => return format!("ledger:{cause}"),
        LedgerChange::Reserve { .. } => "reserve",
        LedgerChange::Start { .. } => "start",
        LedgerChange::Requeue { .. } => "requeue",
        LedgerChange::Reopen { .. } => "reopen",
        LedgerChange::Unreclaim { .. } => "unreclaim",
        LedgerChange::Task { .. } => "task",
        LedgerChange::Release { .. } => "release",
        LedgerChange::Charge { .. } => "charge",
        LedgerChange::Drop { .. } => "drop",
    };
    format!("ledger:{cause}:{job}:{kind}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_answers_are_bounded_and_found_by_id() {
        let mut s = Shared::default();
        let a = |k| LedgerAnswer { kind: k, verdicts: Vec::new() };
        for i in 0..ANSWERS_KEPT + 10 {
            s.remember(&format!("op{i}"), a(DecisionKind::Allow));
        }
        assert!(s.answer("op0").is_none(), "the oldest are forgotten");
        assert_eq!(s.answer(&format!("op{}", ANSWERS_KEPT + 9)).map(|a| a.kind), Some(DecisionKind::Allow));
        // Through a snapshot: the index is rebuilt.
        let mut back: Shared = serde_json::from_str(&serde_json::to_string(&s).unwrap_or_default()).unwrap_or_default();
        assert_eq!(back.answer("op20").map(|a| a.kind), Some(DecisionKind::Allow));
        assert!(back.answer("op5").is_none());
    }

    #[test]
    fn tracked_jobs_survive_a_snapshot() {
        let mut s = Shared::default();
        s.track(&Arc::from("j1"));
        s.track(&Arc::from("j2"));
        s.untrack("j1");
        let mut back: Shared = serde_json::from_str(&serde_json::to_string(&s).unwrap_or_default()).unwrap_or_default();
        assert!(!back.tracks("j1") && back.tracks("j2"));
    }
}
