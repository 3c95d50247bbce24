//! `bursar kube checks`: the controller of bursar's Kueue AdmissionChecks.
//!
//! It follows the AdmissionChecks whose `spec.controllerName` is [`crate::CONTROLLER_NAME`] (and
//! marks each `Active`, which Kueue needs before a ClusterQueue using it admits anything) and every
//! Workload. For a Workload that is active, has quota reserved and holds one of those checks as
//! `Pending`, it builds the `job.submitted` ([`crate::submit`]), asks serve's `/v1/admit`, and writes
//! the answer into the check's entry of `status.admissionChecks`:
//!
//! | decision           | check state | message                                   |
//! |--------------------|-------------|-------------------------------------------|
//! | `allow`            | `Ready`     | `bursar: allowed: <reason>`               |
//! | `deny`             | `Rejected`  | `bursar: <reason>` (Kueue deactivates it) |
//! | `require_approval` | `Pending`   | `bursar: waiting for approval: <reason>`; `bursar kube enforce` sets `Ready` or `Rejected` when the answer comes |
//! | `defer`            | `Pending`   | `bursar: deferred until <time>: <reason>`; `Ready` at that time |
//!
//! Writes are server-side apply patches (`application/apply-patch+yaml`) to the `status`
//! subresource, field manager `bursar-admission-check`, naming only bursar's entry of the list (a
//! `listType=map` keyed by `name`, so Kueue's and other controllers' entries are untouched), and
//! carrying the `resourceVersion` read: a Workload changed in between (Kueue evicted it and reset
//! the checks, an approval landed) is a `409 Conflict`, and the Workload is read again and judged
//! anew rather than overwritten.
//!
//! Restart-safe by construction: the submission's id is derived from the Workload's uid, so asking
//! again after a crash gets serve's first answer back (`duplicate`), never a second decision. When
//! serve cannot be reached the check stays `Pending` (Kueue keeps the Workload waiting; fail closed)
//! and is asked again every `resync`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bursar_agent::server::Server;
use bursar_model::api::AdmitReply;
use bursar_model::{DecisionKind, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::kueue::{AdmissionCheck, CheckState, ResourceFlavor, Workload};
use crate::reflect::{self, Counters, Feed, Settings};
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
    /// How often deferred Workloads and failed asks are looked at again.
    pub resync: Duration,
    /// Server-side timeout of each watch, seconds.
    pub watch_timeout: u32,
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

/// What the controller decided for a Workload and still has to act on.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    /// Waiting for an approval (the enforcer answers).
    Approval,
    /// Deferred until then.
    Until(Timestamp),
}

/// The check state and message for an admission decision, and what is left to wait for.
fn answer(reply: &AdmitReply, at: Timestamp) -> Option<(CheckState, String, Option<Held>)> {
    let d = &reply.admission.decision;
    let reason = &d.reason;
    Some(match d.decision {
        DecisionKind::Allow => (CheckState::Ready, format!("bursar: allowed: {reason}"), None),
        DecisionKind::Deny => (CheckState::Rejected, format!("bursar: {reason}"), None),
        DecisionKind::RequireApproval => {
            (CheckState::Pending, format!("bursar: waiting for approval: {reason}"), Some(Held::Approval))
        }
        DecisionKind::Defer => match d.until {
            Some(until) if until > at => {
                (CheckState::Pending, format!("bursar: deferred until {until}: {reason}"), Some(Held::Until(until)))
            }
            _ => (CheckState::Ready, format!("bursar: deferred, now due: {reason}"), None),
        },
        DecisionKind::Reclaim | DecisionKind::Alert => return None,
    })
}

/// The controller's working state.
struct Controller {
    client: Client,
    cfg: ChecksConfig,
    ours: BTreeMap<String, AdmissionCheck>,
    workloads: BTreeMap<String, Workload>,
    held: HashMap<String, Held>,
    flavors: HashMap<String, BTreeMap<String, String>>,
    /// Workloads whose ask failed (serve down): asked again at the next resync.
    retry: bool,
}

/// Messages of the reflectors.
enum Msg {
    Workloads(Feed<Workload>),
    Checks(Feed<AdmissionCheck>),
}

impl Controller {
    fn our_pending<'a>(&self, w: &'a Workload) -> Vec<&'a str> {
        let Some(status) = &w.status else { return Vec::new() };
        status
            .admission_checks
            .iter()
            .filter(|c| c.state == CheckState::Pending && self.ours.contains_key(&c.name))
            .map(|c| c.name.as_str())
            .collect()
    }

    async fn flavor(&mut self, w: &Workload) -> Option<(String, BTreeMap<String, String>)> {
        let name = w
            .status
            .as_ref()?
            .admission
            .as_ref()?
            .pod_set_assignments
            .iter()
            .find_map(|p| p.flavors.get(&self.cfg.mapping.gpu_resource).cloned())?;
        if let Some(labels) = self.flavors.get(&name) {
            return Some((name, labels.clone()));
        }
        let api: Api<ResourceFlavor> = Api::all(self.client.clone());
        match api.get(&name).await {
            Ok(f) => {
                self.flavors.insert(name.clone(), f.spec.node_labels.clone());
                Some((name, f.spec.node_labels))
            }
            Err(e) => {
                tracing::warn!(flavor = %name, error = %e, "cannot read the ResourceFlavor; using its name as the GPU type");
                Some((name, BTreeMap::new()))
            }
        }
    }

    async fn ask(&self, event: bursar_model::Event) -> Result<AdmitReply> {
        let server = self.cfg.server.clone();
        tokio::task::spawn_blocking(move || server.admit(&event))
            .await
            .map_err(|e| Error::Settings(format!("the ask to serve did not finish: {e}")))?
            .map_err(Error::from)
    }

    /// Decides every pending check of Workload `uid`, reading it again after a conflict.
    async fn judge(&mut self, uid: &str) {
        for _attempt in 0..5 {
            let Some(w) = self.workloads.get(uid).cloned() else { return };
            match self.judge_once(&w).await {
                Ok(()) => return,
                Err(e) if e.is_conflict() => {
                    tracing::info!(workload = %w.name_any(), "409 Conflict: the Workload changed; reading it again");
                    let api: Api<Workload> = Api::namespaced(self.client.clone(), &w.namespace().unwrap_or_default());
                    match api.get(&w.name_any()).await {
                        Ok(fresh) => {
                            self.workloads.insert(uid.to_owned(), fresh);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot read the Workload again");
                            self.retry = true;
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(workload = %w.name_any(), error = %e, "admission check not decided; trying again later");
                    self.retry = true;
                    return;
                }
            }
        }
    }

    async fn judge_once(&mut self, w: &Workload) -> Result<()> {
        let uid = w.uid().unwrap_or_default();
        let pending: Vec<String> = self.our_pending(w).into_iter().map(str::to_owned).collect();
        if pending.is_empty() || !w.is_active() || !w.quota_reserved() {
            return Ok(());
        }
        let at = now();
        let decided = match self.held.get(&uid) {
            Some(Held::Approval) => None,
            Some(Held::Until(t)) if *t > at => None,
            Some(Held::Until(t)) => Some((CheckState::Ready, format!("bursar: deferred until {t}: now due"), None)),
            None => {
                let flavor = self.flavor(w).await;
                let event = Submission::of_workload(w, &self.cfg.mapping, flavor).event(&self.cfg.mapping, at);
                let reply = self.ask(event).await?;
                let d = &reply.admission.decision;
                tracing::info!(
                    workload = %format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any()),
                    job = d.job_id.as_deref().unwrap_or("-"),
                    decision = d.decision.as_str(),
                    duplicate = reply.duplicate,
                    "admission"
                );
                answer(&reply, at)
            }
        };
        let Some((state, message, held)) = decided else {
            return Ok(());
        };
        for check in &pending {
            let current = w.check(check);
            if current.is_some_and(|c| c.state == state && c.message == short(&message)) {
                continue;
            }
            let written = set_check(&self.client, w, check, state, &message).await?;
            self.workloads.insert(uid.clone(), written);
        }
        match held {
            Some(h) => {
                self.held.insert(uid, h);
            }
            None => {
                self.held.remove(&uid);
            }
        }
        Ok(())
    }

    async fn on(&mut self, msg: Msg) {
        match msg {
            Msg::Checks(feed) => {
                let mut changed = Vec::new();
                match feed {
                    Feed::Listed(all) => {
                        self.ours.clear();
                        for ac in all.into_iter().filter(|a| a.spec.controller_name == CONTROLLER_NAME) {
                            changed.push(ac.name_any());
                            self.ours.insert(ac.name_any(), ac);
                        }
                    }
                    Feed::Applied(ac) if ac.spec.controller_name == CONTROLLER_NAME => {
                        changed.push(ac.name_any());
                        self.ours.insert(ac.name_any(), ac);
                    }
                    Feed::Applied(ac) | Feed::Deleted(ac) => {
                        self.ours.remove(&ac.name_any());
                    }
                }
                for name in changed {
                    let Some(ac) = self.ours.get(&name).cloned() else { continue };
                    let active = ac.status.as_ref().is_some_and(|s| crate::kueue::is_true(&s.conditions, "Active"));
                    if !active && let Err(e) = activate(&self.client, &ac).await {
                        tracing::warn!(error = %e, "cannot mark the AdmissionCheck active");
                        self.retry = true;
                    }
                }
                // A check that became bursar's may have Workloads waiting on it.
                let all: Vec<String> = self.workloads.keys().cloned().collect();
                for uid in all {
                    self.judge(&uid).await;
                }
            }
            Msg::Workloads(feed) => {
                let touched: Vec<String> = match feed {
                    Feed::Listed(all) => {
                        self.workloads = all.into_iter().map(|w| (w.uid().unwrap_or_default(), w)).collect();
                        self.held.retain(|uid, _| self.workloads.contains_key(uid));
                        self.workloads.keys().cloned().collect()
                    }
                    Feed::Applied(w) => {
                        let uid = w.uid().unwrap_or_default();
                        self.workloads.insert(uid.clone(), w);
                        vec![uid]
                    }
                    Feed::Deleted(w) => {
                        let uid = w.uid().unwrap_or_default();
                        self.workloads.remove(&uid);
                        self.held.remove(&uid);
                        Vec::new()
                    }
                };
                for uid in touched {
                    self.judge(&uid).await;
                }
            }
        }
    }

    async fn resync(&mut self) {
        let at = now();
        let due: Vec<String> = if self.retry {
            self.retry = false;
            self.workloads.keys().cloned().collect()
        } else {
            self.held.iter().filter(|(_, h)| matches!(h, Held::Until(t) if *t <= at)).map(|(u, _)| u.clone()).collect()
        };
        for uid in due {
            self.judge(&uid).await;
        }
        let inactive: Vec<AdmissionCheck> = self
            .ours
            .values()
            .filter(|ac| !ac.status.as_ref().is_some_and(|s| crate::kueue::is_true(&s.conditions, "Active")))
            .cloned()
            .collect();
        for ac in inactive {
            if let Err(e) = activate(&self.client, &ac).await {
                tracing::warn!(error = %e, "cannot mark the AdmissionCheck active");
            }
        }
    }
}

/// Runs the controller until the process ends. The reflectors' counters are returned through
/// `counters` (workloads, admission checks) for tests and logs.
pub async fn run(client: Client, cfg: ChecksConfig, counters: [Arc<Counters>; 2]) -> Result<()> {
    let (tx, mut rx) = mpsc::channel::<Msg>(256);
    let settings = |name: &str| Settings { name: name.into(), watch_timeout: cfg.watch_timeout, ..Settings::default() };
    let [wc, cc] = counters;
    let wl_tx = tx.clone();
    tokio::spawn(reflect::run(Api::<Workload>::all(client.clone()), settings("workloads"), wl_tx, Msg::Workloads, wc));
    tokio::spawn(reflect::run(
        Api::<AdmissionCheck>::all(client.clone()),
        settings("admissionchecks"),
        tx,
        Msg::Checks,
        cc,
    ));
    let mut ctl = Controller {
        client,
        cfg: cfg.clone(),
        ours: BTreeMap::new(),
        workloads: BTreeMap::new(),
        held: HashMap::new(),
        flavors: HashMap::new(),
        retry: false,
    };
    tracing::info!(controller = CONTROLLER_NAME, "kube checks starting");
    let mut tick = tokio::time::interval(cfg.resync);
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(m) => ctl.on(m).await,
                None => return Err(Error::Settings("the watches ended".into())),
            },
            _ = tick.tick() => ctl.resync().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::api::Sequenced;
    use bursar_model::{Decision, Timestamp};

    fn reply(kind: DecisionKind, until: Option<Timestamp>) -> AdmitReply {
        AdmitReply {
            admission: Sequenced {
                seq: 1,
                decision: Decision {
                    decision_id: "e/0".into(),
                    event_id: "e".into(),
                    time: Timestamp(0),
                    job_id: Some("kube-1".into()),
                    project: None,
                    decision: kind,
                    until,
                    policies: vec![],
                    reason: "needs bob".into(),
                    dry_run: false,
                    admission: true,
                    user: None,
                    gpus: None,
                    gpu_hours: None,
                    hints: None,
                },
            },
            duplicate: false,
            test_only: false,
            other_decisions: vec![],
        }
    }

    #[test]
    fn each_admission_decision_is_a_check_state() {
        let at = Timestamp(1_000_000);
        assert_eq!(answer(&reply(DecisionKind::Allow, None), at).map(|a| a.0), Some(CheckState::Ready));
        let (s, m, h) = answer(&reply(DecisionKind::Deny, None), at).unwrap();
        assert_eq!((s, m.as_str(), h), (CheckState::Rejected, "bursar: needs bob", None));
        let (s, m, h) = answer(&reply(DecisionKind::RequireApproval, None), at).unwrap();
        assert_eq!((s, h), (CheckState::Pending, Some(Held::Approval)));
        assert_eq!(m, "bursar: waiting for approval: needs bob");
        let later = Timestamp(2_000_000);
        let (s, m, h) = answer(&reply(DecisionKind::Defer, Some(later)), at).unwrap();
        assert_eq!((s, h), (CheckState::Pending, Some(Held::Until(later))));
        assert!(m.starts_with("bursar: deferred until 1970-01-01T00:33:20Z"), "{m}");
        assert_eq!(
            answer(&reply(DecisionKind::Defer, Some(at)), at).map(|a| a.0),
            Some(CheckState::Ready),
            "already due"
        );
        assert!(answer(&reply(DecisionKind::Alert, None), at).is_none());
    }

    #[test]
    fn messages_are_bounded_on_a_character_boundary() {
        let long = "é".repeat(800);
        let s = short(&long);
        assert!(s.len() <= 1024 + "…".len() && s.ends_with('…'));
        assert_eq!(short("ok"), "ok");
    }
}
