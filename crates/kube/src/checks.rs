//! `bursar kube checks`: the controller of bursar's Kueue AdmissionChecks.
//!
//! For a Workload that is active, has quota reserved and holds one of bursar's checks (the
//! AdmissionChecks whose `spec.controllerName` is [`crate::CONTROLLER_NAME`]) as `Pending`, it
//! builds the `job.submitted` ([`crate::submit`]), asks serve's `/v1/admit`, and writes the answer
//! into the check's entry of `status.admissionChecks`:
//!
//! | decision           | check state | message                                   |
//! |--------------------|-------------|-------------------------------------------|
//! | `allow`            | `Ready`     | `bursar: allowed: <reason>` (and `; expected start in about 40 min in <region> / <queue>` when serve can estimate it) |
//! | `deny`             | `Rejected`  | `bursar: <reason>` (Kueue deactivates it) |
//! | `require_approval` | `Pending`   | `bursar: waiting for approval: <reason>`; `bursar kube enforce` sets `Ready` or `Rejected` when the answer comes |
//! | `defer`            | `Pending`   | `bursar: deferred until <time>: <reason>`; `Ready` at that time |
//!
//! Two kube-runtime [`Controller`]s share one [`Context`]:
//!
//! - **AdmissionChecks** ([`reconcile_check`]): marks each of bursar's checks `Active` (Kueue needs
//!   it before a ClusterQueue using the check admits anything), and the first time it sees one asks
//!   for every Workload to be judged again (a check that became bursar's may have Workloads pending
//!   on it). Its store is how the Workloads' reconcile knows which checks are bursar's.
//! - **Workloads** ([`reconcile`]): judges one Workload, as above. Up to `concurrency` Workloads
//!   are judged at once, so one slow answer from serve holds up only its own Workload; one Workload
//!   is never judged twice at once (kube-runtime's guarantee). What comes next is its [`Action`]:
//!   nothing until the Workload changes once it is decided or held for approval; a requeue at the
//!   time of a deferral (then serve is asked again and answers with its first decision, now due:
//!   `Ready`); and, from [`retry`], a requeue after `resync` when serve cannot be reached (the
//!   check stays `Pending`: Kueue keeps the Workload waiting, fail closed), or at once when the
//!   status write met a `409 Conflict`.
//!
//! Writes are server-side apply patches (`application/apply-patch+yaml`) to the `status`
//! subresource, field manager `bursar-admission-check`, naming only bursar's entry of the list (a
//! `listType=map` keyed by `name`, so Kueue's and other controllers' entries are untouched), and
//! carrying the `resourceVersion` read: a Workload changed in between (Kueue evicted it and reset
//! the checks, an approval landed) is a `409 Conflict`, and the Workload is judged anew on the
//! fresh object rather than overwritten.
//!
//! Restart-safe by construction: the submission's id is derived from the Workload's uid, so asking
//! again (after a crash, at each change of a held Workload, when a deferral falls due) gets serve's
//! first answer back (`duplicate`), never a second decision; the controller keeps no state of its
//! own beyond caches.
//!
//! Style: async throughout (kube-runtime on tokio); serve is asked through [`crate::serve`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bursar_agent::server::Server;
use bursar_model::api::AdmitReply;
use bursar_model::{DecisionKind, Timestamp};
use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::kueue::{AdmissionCheck, CheckState, ResourceFlavor, Workload};
use crate::serve::Serve;
use crate::submit::{Mapping, Submission};
use crate::{CONTROLLER_NAME, Error, Result};

/// The field manager of bursar's status writes.
pub const FIELD_MANAGER: &str = "bursar-admission-check";

/// Settings of `bursar kube checks`.
#[derive(Debug, Clone)]
pub struct ChecksConfig {
    /// serve (a principal with the `submit` power).
    pub server: Server,
    /// The mapping of Workloads to submissions.
    pub mapping: Mapping,
    /// How long after a failed ask (serve down) or write the Workload is looked at again.
    pub resync: Duration,
    /// Server-side timeout of each watch, seconds.
    pub watch_timeout: u32,
    /// How many Workloads are judged at once (at least one).
    pub concurrency: u16,
}

fn now() -> Timestamp {
    Timestamp::wall_clock()
}

fn k8s_time(t: Timestamp) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_millisecond(t.millis()).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

fn short(text: &str) -> String {
    const MAX: usize = 1024;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Writes the state of admission check `check` on Workload `w` (as read, with its
/// `resourceVersion`): a server-side apply to the status subresource naming only that entry.
/// `409 Conflict` means `w` changed since it was read.
pub async fn set_check(
    client: &Client,
    w: &Workload,
    check: &str,
    state: CheckState,
    message: &str,
) -> Result<Workload> {
    let ns = w.namespace().unwrap_or_default();
    let name = w.name_any();
    let api: Api<Workload> = Api::namespaced(client.clone(), &ns);
    let transition = match w.check(check) {
        Some(c) if c.state == state => c.last_transition_time.clone().unwrap_or_else(|| k8s_time(now())),
        _ => k8s_time(now()),
    };
    let patch = json!({
        "apiVersion": crate::kueue::API_VERSION,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": w.resource_version()},
        "status": {"admissionChecks": [{
            "name": check,
            "state": state.as_str(),
            "message": short(message),
            "lastTransitionTime": transition,
        }]}
    });
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(&name, &pp, &Patch::Apply(&patch))
        .await
        .map_err(|e| Error::kube(format!("set check `{check}` of Workload {ns}/{name} to {}", state.as_str()), e))
}

/// Marks AdmissionCheck `ac` `Active` (what Kueue waits for before admitting through it).
async fn activate(client: &Client, ac: &AdmissionCheck) -> Result<()> {
    let api: Api<AdmissionCheck> = Api::all(client.clone());
    let patch = json!({
        "apiVersion": crate::kueue::API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": ac.name_any()},
        "status": {"conditions": [{
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "bursar kube checks decides this check",
            "lastTransitionTime": k8s_time(now()),
            "observedGeneration": ac.metadata.generation.unwrap_or(0),
        }]}
    });
    api.patch_status(&ac.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map(|_| ())
        .map_err(|e| Error::kube(format!("mark AdmissionCheck {} active", ac.name_any()), e))
}

/// The check state and message for an admission decision.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    state: CheckState,
    message: String,
    /// Deferred until then: looked at again at that time.
    until: Option<Timestamp>,
}

/// The answer to write for an admission decision made (or found due) at `at`; `None` for a
/// decision that is no admission answer.
fn answer(reply: &AdmitReply, at: Timestamp) -> Option<Answer> {
    let d = &reply.admission.decision;
    let reason = &d.reason;
    let (state, message, until) = match d.decision {
        DecisionKind::Allow => {
            let when = reply.estimate.as_ref().and_then(|e| e.sentence()).map(|s| format!("; {s}")).unwrap_or_default();
            (CheckState::Ready, format!("bursar: allowed: {reason}{when}"), None)
        }
        DecisionKind::Deny => (CheckState::Rejected, format!("bursar: {reason}"), None),
        DecisionKind::RequireApproval => (CheckState::Pending, format!("bursar: waiting for approval: {reason}"), None),
        DecisionKind::Defer => match d.until {
            Some(until) if until > at => {
                (CheckState::Pending, format!("bursar: deferred until {until}: {reason}"), Some(until))
            }
            Some(until) => (CheckState::Ready, format!("bursar: deferred until {until}, now due: {reason}"), None),
            None => (CheckState::Ready, format!("bursar: deferred, now due: {reason}"), None),
        },
        DecisionKind::Reclaim | DecisionKind::Alert => return None,
    };
    Some(Answer { state, message, until })
}

/// How soon a Workload whose status write met a `409 Conflict` is judged again (its change is on
/// the way through the watch, and triggers a reconcile itself).
const CONFLICT_RETRY: Duration = Duration::from_millis(100);

/// What the reconciles share.
pub struct Context {
    client: Client,
    serve: Serve,
    mapping: Mapping,
    resync: Duration,
    /// Every AdmissionCheck: the store of their controller.
    checks: Store<AdmissionCheck>,
    /// ResourceFlavor → its node labels, each read once.
    flavors: Mutex<HashMap<String, BTreeMap<String, String>>>,
    /// Uids of bursar's AdmissionChecks seen so far.
    known: Mutex<HashSet<String>>,
    /// Asks for every Workload to be judged again.
    rejudge: mpsc::UnboundedSender<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn workload_name(w: &Workload) -> String {
    format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any())
}

impl Context {
    /// The checks of `w` that are bursar's and `Pending`.
    fn our_pending(&self, w: &Workload) -> Vec<String> {
        let Some(status) = &w.status else { return Vec::new() };
        let ours: HashSet<String> = self
            .checks
            .state()
            .iter()
            .filter(|ac| ac.spec.controller_name == CONTROLLER_NAME)
            .map(|ac| ac.name_any())
            .collect();
        status
            .admission_checks
            .iter()
            .filter(|c| c.state == CheckState::Pending && ours.contains(&c.name))
            .map(|c| c.name.clone())
            .collect()
    }

    /// The flavor of `w`'s GPUs and its node labels (read once per flavor).
    async fn flavor(&self, w: &Workload) -> Option<(String, BTreeMap<String, String>)> {
        let name = w
            .status
            .as_ref()?
            .admission
            .as_ref()?
            .pod_set_assignments
            .iter()
            .find_map(|p| crate::gpus::gpu_flavor(&p.flavors, &self.mapping).cloned())?;
        if let Some(labels) = lock(&self.flavors).get(&name).cloned() {
            return Some((name, labels));
        }
        let api: Api<ResourceFlavor> = Api::all(self.client.clone());
        match api.get(&name).await {
            Ok(f) => {
                lock(&self.flavors).insert(name.clone(), f.spec.node_labels.clone());
                Some((name, f.spec.node_labels))
            }
            Err(e) => {
                tracing::warn!(flavor = %name, error = %e, "cannot read the ResourceFlavor; using its name as the GPU type");
                Some((name, BTreeMap::new()))
            }
        }
    }
}

/// Judges Workload `w`: asks serve for its pending bursar checks and writes the answer.
pub async fn reconcile(w: Arc<Workload>, ctx: Arc<Context>) -> Result<Action> {
    // Which checks are bursar's is known once the AdmissionChecks are listed.
    ctx.checks.wait_until_ready().await.map_err(|_| Error::Stopped("the AdmissionChecks' controller"))?;
    let pending = ctx.our_pending(&w);
    if pending.is_empty() || !w.is_active() || !w.quota_reserved() {
        return Ok(Action::await_change());
    }
    let at = now();
    let flavor = ctx.flavor(&w).await;
    let event = Submission::of_workload(&w, &ctx.mapping, flavor).event(&ctx.mapping, at);
    let reply = ctx.serve.admit(event).await?;
    let d = &reply.admission.decision;
    tracing::info!(
        workload = %workload_name(&w),
        job = d.job_id.as_deref().unwrap_or("-"),
        decision = d.decision.as_str(),
        duplicate = reply.duplicate,
        "admission"
    );
    let Some(answer) = answer(&reply, at) else {
        return Ok(Action::await_change());
    };
    let mut current = Workload::clone(&w);
    for check in &pending {
        if current.check(check).is_some_and(|c| c.state == answer.state && c.message == short(&answer.message)) {
            continue;
        }
        current = set_check(&ctx.client, &current, check, answer.state, &answer.message).await?;
    }
    Ok(match answer.until {
        Some(until) => Action::requeue(Duration::from_millis(u64::try_from(until.millis() - at.millis()).unwrap_or(0))),
        None => Action::await_change(),
    })
}

/// What follows a failed judgement of `w`.
pub fn retry(w: Arc<Workload>, e: &Error, ctx: Arc<Context>) -> Action {
    if e.is_conflict() {
        tracing::info!(workload = %workload_name(&w), "409 Conflict: the Workload changed; judging it again");
        Action::requeue(CONFLICT_RETRY)
    } else {
        tracing::warn!(workload = %workload_name(&w), error = %e, "admission check not decided; trying again later");
        Action::requeue(ctx.resync)
    }
}

/// Looks after AdmissionCheck `ac` if it is bursar's: judges every Workload again the first time
/// it is seen, and marks it `Active`.
pub async fn reconcile_check(ac: Arc<AdmissionCheck>, ctx: Arc<Context>) -> Result<Action> {
    if ac.spec.controller_name != CONTROLLER_NAME {
        return Ok(Action::await_change());
    }
    if ac.uid().is_some_and(|uid| lock(&ctx.known).insert(uid)) {
        tracing::info!(check = %ac.name_any(), "bursar's AdmissionCheck; judging the Workloads pending on it");
        // The receiver lives as long as the Workloads' controller; without it there is no one to ask.
        let _ = ctx.rejudge.send(());
    }
    let active = ac.status.as_ref().is_some_and(|s| crate::kueue::is_true(&s.conditions, "Active"));
    if !active {
        activate(&ctx.client, &ac).await?;
    }
    Ok(Action::await_change())
}

/// What follows a failed [`reconcile_check`].
pub fn retry_check(ac: Arc<AdmissionCheck>, e: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(check = %ac.name_any(), error = %e, "cannot mark the AdmissionCheck active; trying again later");
    Action::requeue(ctx.resync)
}

/// Logs what a controller's stream says besides its reconciles (each reconcile's failure was
/// logged by its error policy).
fn report<K: kube::Resource>(
    kind: &str,
    item: std::result::Result<
        (kube::runtime::reflector::ObjectRef<K>, Action),
        controller::Error<Error, watcher::Error>,
    >,
) {
    match item {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(controller::Error::QueueError(e)) => crate::watching::log_error(kind, &e),
        Err(e) => tracing::debug!(kind, error = %e, "controller"),
    }
}

/// Runs the controller until the process ends.
pub async fn run(client: Client, cfg: ChecksConfig) -> Result<()> {
    let wc = crate::watching::config(cfg.watch_timeout, None);
    let checks = Controller::new(Api::<AdmissionCheck>::all(client.clone()), wc.clone());
    let (rejudge, asked) = mpsc::unbounded_channel();
    let ctx = Arc::new(Context {
        client: client.clone(),
        serve: Serve::new(cfg.server.clone()),
        mapping: cfg.mapping.clone(),
        resync: cfg.resync,
        checks: checks.store(),
        flavors: Mutex::new(HashMap::new()),
        known: Mutex::new(HashSet::new()),
        rejudge,
    });
    let asked = futures_util::stream::unfold(asked, |mut rx| async move { rx.recv().await.map(|()| ((), rx)) });
    let workloads = Controller::new(Api::<Workload>::all(client), wc)
        .with_config(controller::Config::default().concurrency(cfg.concurrency.max(1)))
        .reconcile_all_on(asked)
        .run(reconcile, retry, ctx.clone())
        .for_each(|item| async move { report("workloads", item) });
    let checks =
        checks.run(reconcile_check, retry_check, ctx).for_each(|item| async move { report("admissionchecks", item) });
    tracing::info!(controller = CONTROLLER_NAME, concurrency = cfg.concurrency.max(1), "kube checks starting");
    tokio::select! {
        () = workloads => Err(Error::Stopped("the Workloads' controller")),
        () = checks => Err(Error::Stopped("the AdmissionChecks' controller")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::Timestamp;
    use bursar_model::api::Sequenced;

    fn reply(kind: DecisionKind, until: Option<Timestamp>) -> AdmitReply {
        let decision = json!({"decision_id": "e/0", "event_id": "e", "time": "2026-11-02T09:00:00Z", "job_id": "kube-1",
            "decision": kind.as_str(), "until": until.map(|t| t.to_string()), "policies": [], "reason": "needs bob",
            "admission": true});
        let admission = Sequenced { seq: 1, decision: serde_json::from_value(decision).unwrap() };
        AdmitReply { admission, duplicate: false, test_only: false, other_decisions: vec![], estimate: None }
    }

    #[test]
    fn each_admission_decision_is_a_check_state() {
        let at = Timestamp(1_000_000);
        let of = |kind, until| answer(&reply(kind, until), at).unwrap();
        assert_eq!(of(DecisionKind::Allow, None).state, CheckState::Ready);
        assert_eq!(
            of(DecisionKind::Deny, None),
            Answer { state: CheckState::Rejected, message: "bursar: needs bob".into(), until: None }
        );
        assert_eq!(
            of(DecisionKind::RequireApproval, None),
            Answer {
                state: CheckState::Pending,
                message: "bursar: waiting for approval: needs bob".into(),
                until: None
            },
            "held until the enforcer answers: nothing to look at again before the Workload changes"
        );
        let later = Timestamp(2_000_000);
        let deferred = of(DecisionKind::Defer, Some(later));
        assert_eq!((deferred.state, deferred.until), (CheckState::Pending, Some(later)), "looked at again then");
        assert!(deferred.message.starts_with("bursar: deferred until 1970-01-01T00:33:20Z"), "{deferred:?}");
        let due = of(DecisionKind::Defer, Some(at));
        assert_eq!((due.state, due.until), (CheckState::Ready, None), "already due");
        assert!(due.message.starts_with("bursar: deferred until 1970-01-01T00:16:40Z, now due: "), "{due:?}");
        assert!(answer(&reply(DecisionKind::Alert, None), at).is_none());
    }

    /// Issue 53: an allow says when the job is expected to start, when serve could estimate it.
    #[test]
    fn an_allow_carries_the_expected_start() {
        let mut r = reply(DecisionKind::Allow, None);
        r.estimate = Some(
            serde_json::from_value(json!({"region": "gpu-a", "queue": "team-nlp", "in_service": 8,
            "allocated": 8, "free": 0, "drained": 0, "reported": "2026-11-02T09:00:00Z", "running_jobs": 1,
            "waiting_jobs": 0, "start": "2026-11-02T09:40:00Z", "wait_s": 2400}))
            .unwrap(),
        );
        let a = answer(&r, Timestamp(0)).unwrap();
        assert_eq!(a.message, "bursar: allowed: needs bob; expected start in about 40 min in gpu-a / team-nlp");
    }

    #[test]
    fn messages_are_bounded_on_a_character_boundary() {
        let long = "é".repeat(800);
        let s = short(&long);
        assert!(s.len() <= 1024 + "…".len() && s.ends_with('…'));
        assert_eq!(short("ok"), "ok");
    }
}
