//! The `bursar:policy/state` imports: read-only, deterministic answers from the engine's [`State`].
//!
//! The engine's state is borrowed for exactly the duration of one guest call through a scoped
//! thread-local ([`CURRENT`]), because a wasmtime store's data must be `'static`. Outside a call (during
//! `init`) every query answers as if the state were empty, so `init` cannot depend on the stream.

use bursar_engine::{JobPhase, ScopeKind, State};
use bursar_model::{FinishStatus, Period, Timestamp};

use crate::bindings::bursar::policy::{state as wit_state, types as t};
use crate::host::StoreData;

scoped_tls::scoped_thread_local!(
    /// The engine state of the guest call in progress on this thread.
    pub(crate) static CURRENT: State
);

fn with_state<R>(empty: R, f: impl FnOnce(&State) -> R) -> R {
    if CURRENT.is_set() { CURRENT.with(f) } else { empty }
}

fn scope(s: t::ScopeKind) -> ScopeKind {
    match s {
        t::ScopeKind::Project => ScopeKind::Project,
        t::ScopeKind::User => ScopeKind::User,
        t::ScopeKind::Tag => ScopeKind::Tag,
    }
}

fn status(s: FinishStatus) -> t::FinishStatus {
    match s {
        FinishStatus::Succeeded => t::FinishStatus::Succeeded,
        FinishStatus::Failed => t::FinishStatus::Failed,
        FinishStatus::Cancelled => t::FinishStatus::Cancelled,
    }
}

fn phase(p: JobPhase) -> t::JobPhase {
    match p {
        JobPhase::PendingApproval => t::JobPhase::PendingApproval,
        JobPhase::Deferred => t::JobPhase::Deferred,
        JobPhase::Admitted => t::JobPhase::Admitted,
        JobPhase::Running => t::JobPhase::Running,
        JobPhase::Finished => t::JobPhase::Finished,
        JobPhase::Reclaimed => t::JobPhase::Reclaimed,
    }
}

impl t::Host for StoreData {}

impl wit_state::Host for StoreData {
    fn usage(&mut self, s: t::ScopeKind, name: String, period: t::Period, at: i64) -> t::UsageSummary {
        let period = match period {
            t::Period::Day => Period::Day,
            t::Period::Week => Period::Week,
            t::Period::Month => Period::Month,
        };
        let zero = t::UsageSummary { reserved: 0.0, used: 0.0, charged: 0.0, unbilled: 0.0 };
        with_state(zero, |st| {
            let u = st.usage(scope(s), &name, period, Timestamp(at));
            t::UsageSummary { reserved: u.reserved, used: u.used, charged: u.charged, unbilled: u.unbilled }
        })
    }

    fn ledger(&mut self, s: t::ScopeKind, name: String) -> Option<t::GpusNow> {
        with_state(None, |st| {
            st.ledger(scope(s), &name).map(|l| t::GpusNow {
                name,
                held: l.held_gpus.ceil(),
                running: l.running_gpus.ceil(),
            })
        })
    }

    fn projects(&mut self) -> Vec<t::GpusNow> {
        with_state(Vec::new(), |st| {
            let mut all: Vec<t::GpusNow> = st
                .ledgers(bursar_engine::ScopeKind::Project)
                .map(|(name, l)| t::GpusNow {
                    name: name.to_string(),
                    held: l.held_gpus.ceil(),
                    running: l.running_gpus.ceil(),
                })
                .collect();
            // The map's order is not stable; the guest must see the same list on every replay.
            all.sort_by(|a, b| a.name.cmp(&b.name));
            all
        })
    }

    fn job(&mut self, id: String) -> Option<t::JobInfo> {
        with_state(None, |st| {
            st.job(&id).map(|j| t::JobInfo {
                project: j.project().to_string(),
                user: j.user().to_string(),
                gpus: j.gpus().ceil(),
                requested_hours: j.requested_hours(),
                phase: phase(j.phase()),
                submitted: j.submitted().millis(),
                started: j.started().map(Timestamp::millis),
                ended: j.ended().map(Timestamp::millis),
                status: j.status().map(status),
                gpu_util: j.util().gpu_util,
                avg_gpu_util: j.util().avg_gpu_util,
                samples: j.util().samples,
                last_sample: j.util().last_sample.get().map(Timestamp::millis),
                keepalive: j.util().keepalive.get().map(Timestamp::millis),
            })
        })
    }

    fn asset(&mut self, fingerprint: String) -> Option<t::AssetInfo> {
        with_state(None, |st| {
            st.asset(&fingerprint).map(|a| t::AssetInfo {
                kind: a.kind.to_string(),
                project: a.project.to_string(),
                uri: a.uri.clone(),
                registered: a.registered.millis(),
            })
        })
    }

    fn trial(&mut self, config_key: String) -> Option<t::TrialHistory> {
        with_state(None, |st| {
            st.trial(&config_key).map(|h| {
                let mut successes: Vec<t::TrialRun> =
                    h.successes.iter().map(|(gpus, at)| t::TrialRun { gpus: gpus.ceil(), at: at.millis() }).collect();
                successes.sort_by_key(|r| (r.gpus, r.at));
                t::TrialHistory { successes, last_failure: h.last_failure.map(Timestamp::millis) }
            })
        })
    }
}
