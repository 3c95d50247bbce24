//! The admission webhook's decisions on one `AdmissionReview` v1, without any I/O: read the body
//! ([`parse`], the parser of untrusted input the fuzz target `kube_review` exercises), decide what
//! the request needs ([`triage`]), and turn serve's admission decision into the answer, with the
//! RFC 6902 patch a mutating webhook returns ([`respond`]).
//!
//! On `CREATE` of a kind the site lists, asking for GPUs and not owned by a controller (a Job's
//! pods are admitted with their Job), bursar builds the `job.submitted` with the request's
//! `userInfo.username` as the user and asks serve:
//!
//! | decision           | answer                                                                      |
//! |--------------------|-----------------------------------------------------------------------------|
//! | `allow`            | allowed; annotation and pod-template label `bursar.dev/job: <id>`            |
//! | `deny`             | refused (403) with bursar's reason                                          |
//! | `require_approval` | allowed, created suspended (`suspend: true`; a Pod: scheduling gate `bursar.dev/approval`), `bursar.dev/hold: approval`; a warning says so |
//! | `defer`            | allowed, held the same way with `bursar.dev/hold: defer` and `bursar.dev/until` |
//!
//! bursar's marks (`bursar.dev/*` annotations, the `bursar.dev/job` label) on a new object are
//! bursar's to write: the ones a user wrote are replaced. On `UPDATE`, only the agents' own users
//! (`--agent-user`, the enforcer's service account) may resume a held object, or change or remove
//! bursar's marks; anyone else is refused with what to do instead. A `dryRun` request is answered
//! with what serve would decide, asked as a preview that records nothing (`POST
//! /v1/admit?test_only=true`), so the webhook keeps `sideEffects: NoneOnDryRun`.

use std::collections::BTreeMap;

use bursar_model::{Decision, DecisionKind, Event, Timestamp};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};

use crate::kinds::{self, DECISION, GATE, HOLD, Kind, RECLAIMED, UNTIL};
use crate::submit::{JOB_KEY, Mapping, Submission, job_id};

/// Settings of the webhook's decisions.
#[derive(Debug, Clone)]
pub struct ReviewConfig {
    /// The mapping (cluster name, GPU resource, project label).
    pub mapping: Mapping,
    /// The kinds admitted.
    pub kinds: Vec<Kind>,
    /// Users that may change bursar's marks (the enforcer's service account,
    /// `system:serviceaccount:<ns>:<name>`).
    pub agent_users: Vec<String>,
}

/// Why a body is not an AdmissionReview request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or not an AdmissionReview of this shape.
    #[error("not an AdmissionReview: {0}")]
    Shape(String),
    /// Not `admission.k8s.io/v1`.
    #[error("AdmissionReview `{0}` is not admission.k8s.io/v1")]
    Version(String),
    /// A review without a request.
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// Reads an AdmissionReview v1 body.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| ReviewError::Shape(e.to_string()))?;
    if review.types.api_version != "admission.k8s.io/v1" || review.types.kind != "AdmissionReview" {
        return Err(ReviewError::Version(format!("{}/{}", review.types.api_version, review.types.kind)));
    }
    review.try_into().map_err(|_| ReviewError::NoRequest)
}

/// What a request needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Triage {
    /// Allowed as it is, with the reason (for the log).
    Allow(&'static str),
    /// Refused, with the message.
    Refuse(String),
    /// A new object to submit: its kind, the object, and its `job.submitted`.
    Submit {
        /// The kind.
        kind: Kind,
        /// The object as it came.
        object: Value,
        /// The submission.
        event: Box<Event>,
        /// A dry run: ask what serve would decide, recording nothing.
        dry_run: bool,
    },
}

fn object_json(o: &Option<DynamicObject>) -> Value {
    o.as_ref().and_then(|o| serde_json::to_value(o).ok()).unwrap_or(Value::Null)
}

/// The annotations only bursar writes (the others under `bursar.dev/` are the user's declarations:
/// stage, dataset, readiness, …).
pub const MARKS: [&str; 5] = [JOB_KEY, HOLD, UNTIL, DECISION, RECLAIMED];

fn marks(obj: &Value) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> =
        kinds::annotations(obj).into_iter().filter(|(k, _)| MARKS.contains(&k.as_str())).collect();
    if let Some(v) = kinds::labels(obj).get(JOB_KEY) {
        out.insert(format!("label:{JOB_KEY}"), v.clone());
    }
    out
}

/// Decides what `req` needs, at `now`.
pub fn triage(req: &AdmissionRequest<DynamicObject>, cfg: &ReviewConfig, now: Timestamp) -> Triage {
    let k = &req.kind;
    let Some(kind) = cfg.kinds.iter().find(|x| x.matches(&k.group, &k.version, &k.kind)) else {
        return Triage::Allow("not a kind bursar admits");
    };
    if req.sub_resource.is_some() {
        return Triage::Allow("a subresource");
    }
    let agent = cfg.agent_users.iter().any(|u| *u == req.user_info.username.clone().unwrap_or_default());
    match req.operation {
        Operation::Create => {
            let obj = object_json(&req.object);
            let owned = obj
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|o| o.iter().any(|r| r.get("controller").and_then(Value::as_bool) == Some(true)));
            if owned {
                return Triage::Allow("owned by a controller: admitted with its owner");
            }
            let pods = kinds::shapes(kind, &obj, &cfg.mapping);
            if pods.iter().all(|p| p.gpus.is_zero() || p.count == 0) {
                return Triage::Allow("asks for no GPUs");
            }
            let s = Submission {
                key: req.uid.clone(),
                namespace: req.namespace.clone().unwrap_or_default(),
                kind: kind.name().to_owned(),
                name: req.name.clone(),
                labels: kinds::labels(&obj),
                annotations: kinds::annotations(&obj),
                user: req.user_info.username.clone().filter(|u| !u.is_empty()),
                queue: kinds::labels(&obj).get(crate::submit::QUEUE_LABEL).cloned(),
                pods,
                max_seconds: kinds::max_seconds(kind, &obj),
                flavor_labels: None,
            };
            let event = s.event(&cfg.mapping, now);
            Triage::Submit { kind: kind.clone(), object: obj, event: Box::new(event), dry_run: req.dry_run }
        }
        Operation::Update if !agent => {
            let old = object_json(&req.old_object);
            let new = object_json(&req.object);
            let held = kinds::annotation(&old, HOLD).is_some();
            if held && kinds::is_suspended(kind, &old) && !kinds::is_suspended(kind, &new) {
                return Triage::Refuse(format!(
                    "bursar holds this {} ({}): it starts when bursar's approval comes\n  help: ask an approver (`bursar approve {}`), or delete it",
                    kind.name(),
                    kinds::annotation(&old, HOLD).unwrap_or("approval"),
                    kinds::labels(&old).get(JOB_KEY).map_or("<job>", String::as_str)
                ));
            }
            if marks(&old) != marks(&new) {
                return Triage::Refuse(format!(
                    "the annotations {} and the `{JOB_KEY}` label are bursar's\n  help: leave them as they are; bursar's agents change them",
                    MARKS.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                ));
            }
            Triage::Allow("an update that keeps bursar's marks")
        }
        _ => Triage::Allow("not a creation"),
    }
}

/// The object bursar wants in place of `obj` after `decision`: its marks set (and a user's
/// `bursar.dev/*` annotations dropped), its pod templates labelled, and held when the decision holds.
fn wanted(kind: &Kind, obj: &Value, job: &str, decision: &Decision) -> Value {
    let mut out = obj.clone();
    let mut ann: serde_json::Map<String, Value> = kinds::annotations(obj)
        .into_iter()
        .filter(|(k, _)| !MARKS.contains(&k.as_str()))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    ann.insert(JOB_KEY.into(), job.into());
    let hold = match decision.decision {
        DecisionKind::RequireApproval => Some("approval"),
        DecisionKind::Defer => Some("defer"),
        _ => None,
    };
    if let Some(h) = hold {
        ann.insert(HOLD.into(), h.into());
        ann.insert(DECISION.into(), decision.decision_id.clone().into());
        if let Some(until) = decision.until {
            ann.insert(UNTIL.into(), until.to_string().into());
        }
    }
    let label = |meta: &mut Value| {
        if !meta.is_object() {
            *meta = json!({});
        }
        let labels = &mut meta["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[JOB_KEY] = job.into();
    };
    if let Some(m) = out.get_mut("metadata") {
        m["annotations"] = Value::Object(ann);
        label(m);
    }
    for p in kinds::template_pointers(kind, obj) {
        if let Some(parent) = p.strip_suffix("/metadata").and_then(|parent| out.pointer_mut(parent)) {
            label(&mut parent["metadata"]);
        }
    }
    if hold.is_some() {
        match kind.suspend_pointer() {
            Some(pointer) => {
                let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
                let mut at = &mut out;
                for (i, part) in parts.iter().enumerate() {
                    if i + 1 == parts.len() {
                        at[*part] = Value::Bool(true);
                    } else {
                        if !at[*part].is_object() {
                            at[*part] = json!({});
                        }
                        at = &mut at[*part];
                    }
                }
            }
            None => {
                let spec = &mut out["spec"];
                let gates = &mut spec["schedulingGates"];
                if !gates.is_array() {
                    *gates = json!([]);
                }
                if let Some(list) = gates.as_array_mut()
                    && !list.iter().any(|g| g.get("name").and_then(Value::as_str) == Some(GATE))
                {
                    list.push(json!({"name": GATE}));
                }
            }
        }
    }
    out
}

/// The answer to `req` once serve decided (`decision`) on the submission of `object`.
pub fn respond(
    req: &AdmissionRequest<DynamicObject>,
    cfg: &ReviewConfig,
    kind: &Kind,
    object: &Value,
    decision: &Decision,
) -> AdmissionResponse {
    let base = AdmissionResponse::from(req);
    let job = decision.job_id.as_deref().map_or_else(|| job_id(&cfg.mapping.cluster, &req.uid), str::to_owned);
    match decision.decision {
        DecisionKind::Deny => base.deny(format!("bursar: {}", decision.reason)),
        DecisionKind::Allow | DecisionKind::RequireApproval | DecisionKind::Defer => {
            let after = wanted(kind, object, &job, decision);
            let patch = json_patch::diff(object, &after);
            let mut r = match base.clone().with_patch(patch) {
                Ok(r) => r,
                Err(e) => return base.deny(format!("bursar: cannot write the patch: {e}")),
            };
            match decision.decision {
                DecisionKind::RequireApproval => {
                    r.warnings = Some(vec![format!("bursar: held for approval ({job}): {}", decision.reason)]);
                }
                DecisionKind::Defer => {
                    let until = decision.until.map(|t| t.to_string()).unwrap_or_default();
                    r.warnings = Some(vec![format!("bursar: deferred until {until} ({job}): {}", decision.reason)]);
                }
                _ => {}
            }
            r.audit_annotations.insert("job".into(), job);
            r
        }
        DecisionKind::Reclaim | DecisionKind::Alert => {
            base.deny(format!("bursar: unexpected admission decision `{}`", decision.decision.as_str()))
        }
    }
}

/// The answer when serve gave no decision: refused (fail closed) or allowed unchecked (fail open).
pub fn unavailable(req: &AdmissionRequest<DynamicObject>, fail_open: bool, why: &str) -> AdmissionResponse {
    let base = AdmissionResponse::from(req);
    if fail_open {
        let mut r = base;
        r.warnings = Some(vec![format!("bursar: admitted unchecked, the admission service gave no decision ({why})")]);
        r
    } else {
        base.deny(format!("bursar: job rejected: the admission service gave no decision ({why})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::{EventKind, Gpus};

    /// An AdmissionReview v1 as kube-apiserver 1.33 sends it for `kubectl create -f job.yaml`.
    pub(crate) fn review(kind: &str, operation: &str, object: Value, old: Value, user: &str) -> Vec<u8> {
        let (group, version, resource) = match kind {
            "Job" => ("batch", "v1", "jobs"),
            "Pod" => ("", "v1", "pods"),
            _ => ("kubeflow.org", "v1", "pytorchjobs"),
        };
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": resource},
                "requestKind": {"group": group, "version": version, "kind": kind},
                "requestResource": {"group": group, "version": version, "resource": resource},
                "name": "train", "namespace": "nlp", "operation": operation,
                "userInfo": {"username": user, "uid": "014fbff9a07c", "groups": ["system:authenticated", "nlp"]},
                "object": object, "oldObject": old, "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
            }
        }))
        .unwrap()
    }

    pub(crate) fn job(gpus: u32) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "nlp", "labels": {"tags.bursar.dev/team": "search"},
                         "annotations": {"bursar.dev/job": "forged", "bursar.dev/reclaimed": "x", "note": "kept"}},
            "spec": {"parallelism": 2, "completions": 2, "activeDeadlineSeconds": 7200,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "registry/llm:1.4",
                        "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}})
    }

    fn cfg() -> ReviewConfig {
        ReviewConfig {
            mapping: Mapping { cluster: "lab".into(), ..Mapping::default() },
            kinds: vec![Kind::parse("batch/v1/Job").unwrap(), Kind::parse("v1/Pod").unwrap()],
            agent_users: vec!["system:serviceaccount:bursar:bursar-kube".into()],
        }
    }

    fn decision(kind: DecisionKind, job: &str) -> Decision {
        Decision {
            decision_id: "lab-x-submitted/0".into(),
            event_id: "lab-x-submitted".into(),
            time: Timestamp(0),
            job_id: Some(job.into()),
            project: Some("nlp".into()),
            decision: kind,
            until: Some(Timestamp(1_796_018_054_000)),
            policies: vec![],
            reason: "8 GPUs need an approval by bob".into(),
            dry_run: false,
            admission: true,
            user: None,
            gpus: None,
            gpu_hours: None,
            hints: None,
        }
    }

    fn apply(obj: &Value, r: &AdmissionResponse) -> Value {
        let patch: json_patch::Patch = serde_json::from_slice(r.patch.as_deref().unwrap()).unwrap();
        let mut out = obj.clone();
        json_patch::patch(&mut out, &patch).unwrap();
        out
    }

    #[test]
    fn a_gpu_job_is_submitted_as_its_creator() {
        let req = parse(&review("Job", "CREATE", job(4), Value::Null, "alice@example.com")).unwrap();
        let Triage::Submit { event, .. } = triage(&req, &cfg(), Timestamp(0)) else { panic!("not submitted") };
        let EventKind::JobSubmitted(spec) = &event.kind else { panic!("not a submission") };
        assert_eq!(spec.user, "alice@example.com", "userInfo, not a label, is the user");
        assert_eq!((spec.gpus, spec.nodes, spec.requested_hours), (Gpus::whole(8), 2, 2.0));
        assert_eq!(spec.project, "nlp");
        assert_eq!(spec.id, job_id("lab", "705ab4f5-6393-11e8-b7cc-42010a800002"));
        assert_eq!(spec.tag("team"), Some("search"));
    }

    #[test]
    fn a_job_of_mig_slices_is_submitted_with_their_share() {
        let mut j = job(0);
        j["spec"]["template"]["spec"]["containers"][0]["resources"] =
            json!({"limits": {"nvidia.com/mig-1g.10gb": "2"}, "requests": {"nvidia.com/mig-1g.10gb": "2"}});
        let req = parse(&review("Job", "CREATE", j, Value::Null, "alice")).unwrap();
        let Triage::Submit { event, .. } = triage(&req, &cfg(), Timestamp(0)) else { panic!("slices are GPUs") };
        let EventKind::JobSubmitted(spec) = &event.kind else { panic!("not a submission") };
        assert_eq!((spec.gpus, spec.nodes), (Gpus::fraction(4, 7).unwrap(), 2), "2 pods × 2 slices of 1/7");
        assert_eq!(spec.image.as_deref(), Some("registry/llm:1.4"));
        assert!(event.to_json().contains(r#""gpus":"4/7""#), "{}", event.to_json());
    }

    #[test]
    fn what_is_not_bursars_to_admit_is_allowed_as_it_is() {
        let c = cfg();
        let no_gpu = parse(&review("Job", "CREATE", job(0), Value::Null, "alice")).unwrap();
        assert_eq!(triage(&no_gpu, &c, Timestamp(0)), Triage::Allow("asks for no GPUs"));
        let mut pod = json!({"metadata": {"name": "train-abcde", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        let owned = parse(&review(
            "Pod",
            "CREATE",
            pod.clone(),
            Value::Null,
            "system:serviceaccount:kube-system:job-controller",
        ))
        .unwrap();
        assert_eq!(triage(&owned, &c, Timestamp(0)), Triage::Allow("owned by a controller: admitted with its owner"));
        pod["metadata"]["ownerReferences"] = json!([]);
        let bare = parse(&review("Pod", "CREATE", pod, Value::Null, "alice")).unwrap();
        assert!(matches!(triage(&bare, &c, Timestamp(0)), Triage::Submit { .. }), "a bare GPU pod is a job");
        let other = parse(&review("PyTorchJob", "CREATE", json!({}), Value::Null, "alice")).unwrap();
        assert_eq!(triage(&other, &c, Timestamp(0)), Triage::Allow("not a kind bursar admits"));
    }

    #[test]
    fn answers_label_the_job_and_hold_it_for_approval() {
        let c = cfg();
        let req = parse(&review("Job", "CREATE", job(4), Value::Null, "alice")).unwrap();
        let obj = job(4);
        let kind = Kind::parse("batch/v1/Job").unwrap();
        let allow = respond(&req, &c, &kind, &obj, &decision(DecisionKind::Allow, "lab-1"));
        assert!(allow.allowed);
        let after = apply(&obj, &allow);
        assert_eq!(after["metadata"]["annotations"][JOB_KEY], "lab-1", "a forged mark is replaced");
        assert_eq!(after["metadata"]["annotations"]["note"], "kept");
        assert!(after["metadata"]["annotations"].get(RECLAIMED).is_none(), "a user's bursar.dev/ marks are dropped");
        assert_eq!(after["spec"]["template"]["metadata"]["labels"][JOB_KEY], "lab-1", "every pod carries the job");
        assert!(after["spec"].get("suspend").is_none());

        let held = respond(&req, &c, &kind, &obj, &decision(DecisionKind::RequireApproval, "lab-1"));
        let after = apply(&obj, &held);
        assert_eq!(after["spec"]["suspend"], true);
        assert_eq!(after["metadata"]["annotations"][HOLD], "approval");
        assert!(held.warnings.as_ref().is_some_and(|w| w[0].contains("held for approval")));

        let deferred = apply(&obj, &respond(&req, &c, &kind, &obj, &decision(DecisionKind::Defer, "lab-1")));
        assert_eq!(deferred["metadata"]["annotations"][UNTIL], "2026-11-30T05:54:14Z");

        let denied = respond(&req, &c, &kind, &obj, &decision(DecisionKind::Deny, "lab-1"));
        assert!(!denied.allowed);
        assert_eq!(denied.result.message, "bursar: 8 GPUs need an approval by bob");

        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        let pod_kind = Kind::parse("v1/Pod").unwrap();
        let gated = apply(&pod, &respond(&req, &c, &pod_kind, &pod, &decision(DecisionKind::RequireApproval, "lab-2")));
        assert_eq!(gated["spec"]["schedulingGates"], json!([{"name": GATE}]));
        assert_eq!(gated["metadata"]["labels"][JOB_KEY], "lab-2");
    }

    #[test]
    fn only_the_agents_resume_a_held_job_or_touch_its_marks() {
        let c = cfg();
        let mut old = job(4);
        old["metadata"]["annotations"] = json!({JOB_KEY: "lab-1", HOLD: "approval"});
        old["spec"]["suspend"] = json!(true);
        let mut resumed = old.clone();
        resumed["spec"]["suspend"] = json!(false);
        let by_alice = parse(&review("Job", "UPDATE", resumed.clone(), old.clone(), "alice")).unwrap();
        let Triage::Refuse(why) = triage(&by_alice, &c, Timestamp(0)) else { panic!("alice resumed a held job") };
        assert!(why.contains("bursar holds this Job (approval)") && why.contains("help:"), "{why}");
        let by_agent =
            parse(&review("Job", "UPDATE", resumed, old.clone(), "system:serviceaccount:bursar:bursar-kube")).unwrap();
        assert!(matches!(triage(&by_agent, &c, Timestamp(0)), Triage::Allow(_)));
        let mut stripped = old.clone();
        stripped["metadata"]["annotations"] = json!({});
        let r = parse(&review("Job", "UPDATE", stripped, old.clone(), "alice")).unwrap();
        assert!(matches!(triage(&r, &c, Timestamp(0)), Triage::Refuse(m) if m.contains("label are bursar's")));
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"][JOB_KEY] = json!("lab-other");
        let r = parse(&review("Job", "UPDATE", relabelled, old, "alice")).unwrap();
        assert!(matches!(triage(&r, &c, Timestamp(0)), Triage::Refuse(_)));
    }

    #[test]
    fn bodies_that_are_not_a_v1_review_are_named() {
        assert!(matches!(parse(b"not json"), Err(ReviewError::Shape(_))));
        assert!(matches!(
            parse(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#),
            Err(ReviewError::Version(_))
        ));
        assert_eq!(
            parse(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).unwrap_err(),
            ReviewError::NoRequest
        );
    }
}
