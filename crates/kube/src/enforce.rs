//! `bursar kube enforce`: executes bursar's decisions on Kubernetes, as `bursar-agent`'s decision
//! follower with a Kubernetes [`Executor`].
//!
//! | decision                                  | Kueue (`--kueue`)                               | objects (`--kind …`, webhook clusters)         |
//! |-------------------------------------------|-------------------------------------------------|------------------------------------------------|
//! | `reclaim`                                 | deactivate the Workload (`spec.active: false`)  | suspend the object (`spec.suspend`, Kubeflow `spec.runPolicy.suspend`) with `bursar.dev/reclaimed`; delete a bare Pod |
//! | `allow` resolving a held job (approval)   | bursar's check → `Ready`                        | resume it (`suspend: false`, or lift a Pod's scheduling gate) |
//! | `deny` resolving a held job (rejection)   | bursar's check → `Rejected` (Kueue deactivates) | delete it                                      |
//!
//! Admission decisions made at submission (event id `<job>-submitted`) were applied by `bursar kube
//! checks` or the webhook already; `alert`, `defer`, `require_approval` and dry-run decisions ask
//! nothing here. Which decision asks what is `bursar-agent`'s ([`bursar_agent::follow::ask`], the
//! same for every scheduler); this module says what each ask means on Kubernetes. Each action first reads the object: one that already ended, is already
//! deactivated or no longer held is left alone and the record says why (`skipped`), which makes
//! every action idempotent after a restart. Writes are merge patches (`application/merge-patch+json`)
//! of the fields named above, or the status apply of [`crate::checks::set_check`]; a `409
//! Conflict` is retried on a fresh read. Every action is recorded in the audit log (`kube-<decision
//! id>`, [`bursar_agent::record::Record`]), `action.failed` after `max_attempts` tries with the API
//! server's error.
//!
//! Style: blocking, as the decision follower it shares with Slurm's enforcer is (serve's stream,
//! the retries and their waits); each try's Kubernetes calls are one async step, run to its end
//! on the runtime given, in one place ([`execute`]). Call [`run`] outside that runtime.

use std::path::PathBuf;
use std::time::Duration;

use bursar_agent::follow::{self, Ask, Executor, FollowConfig, FollowReport};
use bursar_agent::record::{Outcome, Record, Seen};
use bursar_agent::server::Server;
use bursar_model::api::Sequenced;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::runtime::Handle;

use crate::checks::set_check;
use crate::kinds::{self, HOLD, Kind, RECLAIMED};
use crate::kueue::{CheckState, Workload};
use crate::submit::{JOB_KEY, job_id, object_fields, submitted_id};
use crate::watch::Mode;
use crate::{CONTROLLER_NAME, Error, Result};

/// Settings of `bursar kube enforce`.
#[derive(Debug, Clone)]
pub struct EnforceConfig {
    /// serve (a `producer` that also holds `read`).
    pub server: Server,
    /// The cluster name (job id prefix).
    pub cluster: String,
    /// Kueue Workloads or webhook objects.
    pub mode: Mode,
    /// The state file (the cursor).
    pub state: PathBuf,
    /// Cursor to start from when there is no state file yet.
    pub start_after: u64,
    /// Tries of a failing API call before the failure is recorded.
    pub max_attempts: u32,
    /// Wait after the first failed try (doubles each time).
    pub retry_delay: Duration,
}

/// One object a job id names.
#[derive(Debug, Clone)]
enum Target {
    Workload(Workload),
    Object(Kind, DynamicObject),
}

impl Target {
    fn names(&self) -> (String, String, String) {
        match self {
            Target::Workload(w) => (w.namespace().unwrap_or_default(), "Workload".into(), w.name_any()),
            Target::Object(k, o) => (o.namespace().unwrap_or_default(), k.name().to_owned(), o.name_any()),
        }
    }
}

async fn find(client: &Client, cfg: &EnforceConfig, job: &str) -> Result<Option<Target>> {
    match &cfg.mode {
        Mode::Kueue => {
            let api: Api<Workload> = Api::all(client.clone());
            let list = api.list(&ListParams::default()).await.map_err(|e| Error::kube("list Workloads", e))?;
            Ok(list
                .items
                .into_iter()
                .find(|w| job_id(&cfg.cluster, &w.uid().unwrap_or_default()) == job)
                .map(Target::Workload))
        }
        Mode::Objects(kinds) => {
            for kind in kinds {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
                let lp = ListParams::default().labels(&format!("{JOB_KEY}={job}"));
                let list = api.list(&lp).await.map_err(|e| Error::kube(format!("list {}", kind.plural), e))?;
                if let Some(o) = list.items.into_iter().next() {
                    return Ok(Some(Target::Object(kind.clone(), o)));
                }
            }
            Ok(None)
        }
    }
}

/// The object as JSON.
fn json_of(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or_default()
}

/// A merge patch setting `pointer` (`/spec/suspend`) to `value`, with `annotations` merged in.
fn merge_patch(pointer: &str, value: Value, annotations: Value) -> Value {
    let mut patch = json!({"metadata": {"annotations": annotations}});
    let mut at = &mut patch;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            at[*p] = value.clone();
        } else {
            if at.get(*p).is_none() {
                at[*p] = json!({});
            }
            at = &mut at[*p];
        }
    }
    patch
}

/// One try of `ask` on the job: `Ok((outcome, detail))`, or the API's error.
async fn act(
    client: &Client,
    cfg: &EnforceConfig,
    seen: &Seen,
    ask: Ask,
    job: &str,
    record: &mut Record,
) -> Result<(Outcome, String)> {
    let Some(target) = find(client, cfg, job).await? else {
        return Ok((
            Outcome::Skipped,
            "nothing to do: no object names this job (deleted, or not admitted here)".into(),
        ));
    };
    let (ns, kind, name) = target.names();
    for (k, v) in object_fields(&cfg.cluster, &ns, &kind, &name) {
        record.fields.retain(|(n, _)| n != &k);
        record.fields.push((k, v));
    }
    let merge = PatchParams::default();
    match (ask, target) {
        (Ask::Reclaim, Target::Workload(w)) => {
            if crate::kueue::is_true(w.conditions(), "Finished") {
                return Ok((Outcome::Skipped, format!("nothing to do: Workload {ns}/{name} already finished")));
            }
            if !w.is_active() {
                return Ok((Outcome::Skipped, format!("nothing to do: Workload {ns}/{name} is already deactivated")));
            }
            let api: Api<Workload> = Api::namespaced(client.clone(), &ns);
            let patch = json!({"spec": {"active": false}});
            api.patch(&name, &merge, &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::kube(format!("deactivate Workload {ns}/{name}"), e))?;
            Ok((Outcome::Done, format!("deactivated Workload {ns}/{name} (spec.active: false); Kueue evicts its pods")))
        }
        (Ask::Approve | Ask::Reject, Target::Workload(w)) => {
            let pending: Vec<String> = w
                .status
                .as_ref()
                .map(|s| {
                    s.admission_checks
                        .iter()
                        .filter(|c| c.state == CheckState::Pending)
                        .map(|c| c.name.clone())
                        .collect()
                })
                .unwrap_or_default();
            let ours = ours(client).await?;
            let mine: Vec<&String> = pending.iter().filter(|c| ours.contains(c)).collect();
            if mine.is_empty() {
                let states: Vec<String> = w
                    .status
                    .as_ref()
                    .map(|s| {
                        s.admission_checks
                            .iter()
                            .filter(|c| ours.contains(&c.name))
                            .map(|c| format!("{} is {}", c.name, c.state.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
                return Ok((
                    Outcome::Skipped,
                    format!(
                        "nothing to do: Workload {ns}/{name} is not held by bursar ({})",
                        if states.is_empty() { "no bursar check".to_owned() } else { states.join(", ") }
                    ),
                ));
            }
            let (state, message) = match ask {
                Ask::Approve => (CheckState::Ready, format!("bursar: approved: {}", seen.reason)),
                _ => (CheckState::Rejected, format!("bursar: {}", seen.reason)),
            };
            for check in mine {
                set_check(client, &w, check, state, &message).await?;
            }
            Ok((Outcome::Done, format!("set admission check of Workload {ns}/{name} to {}", state.as_str())))
        }
        (Ask::Reclaim, Target::Object(kind, o)) => {
            let value = json_of(&o);
            // Only whether it ended is read: the GPUs it counts do not matter here.
            let view = kinds::unit_view(&kind, &value, job, &crate::submit::Mapping::default());
            if view.end.is_some() {
                return Ok((
                    Outcome::Skipped,
                    format!("nothing to do: {kind_name} {ns}/{name} already finished", kind_name = kind.name()),
                ));
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.api_resource());
            match kind.suspend_pointer() {
                Some(pointer) => {
                    if kinds::is_suspended(&kind, &value) && kinds::annotation(&value, RECLAIMED).is_some() {
                        return Ok((
                            Outcome::Skipped,
                            format!("nothing to do: {} {ns}/{name} is already suspended by bursar", kind.name()),
                        ));
                    }
                    let patch = merge_patch(pointer, json!(true), json!({RECLAIMED: seen.decision_id}));
                    api.patch(&name, &merge, &Patch::Merge(&patch))
                        .await
                        .map_err(|e| Error::kube(format!("suspend {} {ns}/{name}", kind.name()), e))?;
                    Ok((
                        Outcome::Done,
                        format!("suspended {} {ns}/{name} ({pointer}: true); its pods are deleted", kind.name()),
                    ))
                }
                None => {
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .map_err(|e| Error::kube(format!("delete Pod {ns}/{name}"), e))?;
                    Ok((Outcome::Done, format!("deleted Pod {ns}/{name}")))
                }
            }
        }
        (Ask::Approve, Target::Object(kind, o)) => {
            let value = json_of(&o);
            if kinds::annotation(&value, HOLD).is_none() {
                return Ok((
                    Outcome::Skipped,
                    format!("nothing to do: {} {ns}/{name} is not held by bursar", kind.name()),
                ));
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.api_resource());
            let patch = match kind.suspend_pointer() {
                Some(pointer) => merge_patch(pointer, json!(false), json!({HOLD: null})),
                None => {
                    let gates: Vec<Value> = value
                        .pointer("/spec/schedulingGates")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|g| g.get("name").and_then(Value::as_str) != Some(kinds::GATE))
                        .cloned()
                        .collect();
                    json!({"metadata": {"annotations": {HOLD: null}}, "spec": {"schedulingGates": gates}})
                }
            };
            api.patch(&name, &merge, &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::kube(format!("resume {} {ns}/{name}", kind.name()), e))?;
            Ok((Outcome::Done, format!("resumed {} {ns}/{name}", kind.name())))
        }
        (Ask::Reject, Target::Object(kind, o)) => {
            if kinds::annotation(&json_of(&o), HOLD).is_none() {
                return Ok((
                    Outcome::Skipped,
                    format!("nothing to do: {} {ns}/{name} is not held by bursar", kind.name()),
                ));
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &kind.api_resource());
            let dp =
                DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
            api.delete(&name, &dp).await.map_err(|e| Error::kube(format!("delete {} {ns}/{name}", kind.name()), e))?;
            Ok((Outcome::Done, format!("deleted {} {ns}/{name} (rejected while held)", kind.name())))
        }
    }
}

/// The names of bursar's AdmissionChecks.
async fn ours(client: &Client) -> Result<Vec<String>> {
    let api: Api<crate::kueue::AdmissionCheck> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.map_err(|e| Error::kube("list AdmissionChecks", e))?;
    Ok(list.items.into_iter().filter(|a| a.spec.controller_name == CONTROLLER_NAME).map(|a| a.name_any()).collect())
}

fn action_name(ask: Ask, mode: &Mode) -> &'static str {
    match (ask, mode) {
        (Ask::Reclaim, Mode::Kueue) => "deactivate",
        (Ask::Reclaim, Mode::Objects(_)) => "suspend",
        (Ask::Approve, Mode::Kueue) => "check ready",
        (Ask::Approve, Mode::Objects(_)) => "resume",
        (Ask::Reject, Mode::Kueue) => "check rejected",
        (Ask::Reject, Mode::Objects(_)) => "delete",
    }
}

/// Carries out `ask` for job `job`, retrying failed API calls; returns the record to log. Blocks
/// on `rt` for each try.
pub fn execute(rt: &Handle, client: &Client, cfg: &EnforceConfig, seen: &Seen, ask: Ask, job: &str) -> Record {
    let mut record = Record::new(seen, job, action_name(ask, &cfg.mode));
    record.set_field("kube_cluster", &cfg.cluster);
    record.tried(cfg.max_attempts, cfg.retry_delay, |record| rt.block_on(act(client, cfg, seen, ask, job, record)))
}

struct KubeExecutor<'a> {
    rt: Handle,
    client: Client,
    cfg: &'a EnforceConfig,
}

impl Executor for KubeExecutor<'_> {
    fn submitted_id(&self, job: &str) -> String {
        submitted_id(job)
    }

    fn execute(&mut self, d: &Sequenced, ask: Ask, job: &str) -> Record {
        execute(&self.rt, &self.client, self.cfg, &Seen::of(d), ask, job)
    }
}

/// Follows the decision stream forever (reconnecting with a back-off), or with `once` until it has
/// caught up. Blocking: call it outside the runtime `rt` (which runs the API calls).
pub fn run(rt: Handle, client: Client, cfg: &EnforceConfig, once: bool) -> Result<FollowReport> {
    let follow_cfg = FollowConfig {
        server: cfg.server.clone(),
        state: cfg.state.clone(),
        start_after: cfg.start_after,
        id_prefix: "kube".into(),
    };
    Ok(follow::run(&follow_cfg, &mut KubeExecutor { rt, client, cfg }, once)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submission_is_known_under_the_admission_agents_principal() {
        let deny = |event_id: &str| -> bursar_model::Decision {
            let line = json!({"decision_id": "x", "event_id": event_id, "time": "2026-11-02T09:00:00Z",
                "job_id": "kube-1", "decision": "deny", "policies": [], "reason": "r", "admission": true});
            serde_json::from_value(line).unwrap()
        };
        assert_eq!(follow::ask(&deny("kube-checks:kube-1-submitted"), submitted_id), None, "applied by the check");
        assert_eq!(follow::ask(&deny("kube-1-submitted"), submitted_id), None, "and without a principal");
        assert_eq!(follow::ask(&deny("bob:e-reject"), submitted_id), Some((Ask::Reject, "kube-1")));
    }

    #[test]
    fn merge_patches_name_only_the_flag_and_bursars_annotation() {
        assert_eq!(
            merge_patch("/spec/runPolicy/suspend", json!(true), json!({RECLAIMED: "d1"})),
            json!({"metadata": {"annotations": {"bursar.dev/reclaimed": "d1"}}, "spec": {"runPolicy": {"suspend": true}}})
        );
        assert_eq!(
            merge_patch("/spec/suspend", json!(false), json!({HOLD: null}))["metadata"]["annotations"][HOLD],
            Value::Null
        );
    }
}
