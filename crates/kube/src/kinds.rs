//! The kinds of object the webhook admits and the Jobs-mode watcher follows, read as plain JSON
//! (kube-rs's `DynamicObject`) so one code path serves a `batch/v1` Job, a bare Pod, a JobSet and
//! the Kubeflow training jobs alike: where each keeps its pod templates and replica counts, where
//! it is suspended, and how it says it finished. Written from the Kubernetes 1.33 API reference
//! (Job, Pod), JobSet v1alpha2 and Kubeflow training-operator v1 (`runPolicy.suspend`).

use std::collections::BTreeMap;

use bursar_model::{FinishStatus, Timestamp};
use k8s_openapi::api::core::v1::PodSpec;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::lifecycle::{End, Stop, UnitView};
use crate::submit::{MAX_EXEC_LABEL, Mapping, PodShape};

/// How a kind keeps its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `batch/v1` Job: `spec.template`, `spec.parallelism`, `spec.suspend`.
    Job,
    /// `v1` Pod: itself; held by a scheduling gate, not suspended.
    Pod,
    /// JobSet: `spec.replicatedJobs[].{replicas, template.spec.{parallelism, template}}`,
    /// `spec.suspend`.
    JobSet,
    /// Kubeflow training jobs: `spec.<x>ReplicaSpecs.<role>.{replicas, template}`,
    /// `spec.runPolicy.suspend`.
    Kubeflow,
}

/// A kind the site lists (`--kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// Group, version, kind.
    pub gvk: (String, String, String),
    /// The resource's plural (`jobs`).
    pub plural: String,
    /// How it keeps its pods.
    pub shape: Shape,
}

/// The kinds bursar knows, by `group/version/Kind` (`batch/v1/Job`; the core group is empty: `v1/Pod`).
pub const KNOWN: &[(&str, &str, &str, &str, Shape)] = &[
    ("batch", "v1", "Job", "jobs", Shape::Job),
    ("", "v1", "Pod", "pods", Shape::Pod),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", Shape::JobSet),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", Shape::Kubeflow),
    ("kubeflow.org", "v1", "TFJob", "tfjobs", Shape::Kubeflow),
    ("kubeflow.org", "v1", "XGBoostJob", "xgboostjobs", Shape::Kubeflow),
    ("kubeflow.org", "v1", "PaddleJob", "paddlejobs", Shape::Kubeflow),
    ("kubeflow.org", "v1", "JAXJob", "jaxjobs", Shape::Kubeflow),
    ("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", Shape::Kubeflow),
];

/// The scheduling gate that holds a bare Pod waiting for approval.
pub const GATE: &str = "bursar.dev/approval";

impl Kind {
    /// The kind named `batch/v1/Job`, `v1/Pod`, `kubeflow.org/v1/PyTorchJob`, or just `Job`.
    pub fn parse(text: &str) -> Result<Kind, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let found = KNOWN.iter().find(|(g, v, k, _, _)| match parts.as_slice() {
            [kind] => k == kind,
            [version, kind] => g.is_empty() && v == version && k == kind,
            [group, version, kind] => g == group && v == version && k == kind,
            _ => false,
        });
        match found {
            Some((g, v, k, p, s)) => {
                Ok(Kind { gvk: ((*g).into(), (*v).into(), (*k).into()), plural: (*p).into(), shape: *s })
            }
            None => Err(format!(
                "`{text}` is not a kind bursar can admit\n  help: one of {}",
                KNOWN
                    .iter()
                    .map(|(g, v, k, _, _)| if g.is_empty() { format!("{v}/{k}") } else { format!("{g}/{v}/{k}") })
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The kube-rs resource of this kind.
    pub fn api_resource(&self) -> ApiResource {
        let (g, v, k) = &self.gvk;
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), &self.plural)
    }

    /// The kind's name.
    pub fn name(&self) -> &str {
        &self.gvk.2
    }

    /// Whether an AdmissionReview's `kind` is this one.
    pub fn matches(&self, group: &str, version: &str, kind: &str) -> bool {
        self.gvk.0 == group && self.gvk.1 == version && self.gvk.2 == kind
    }

    /// The JSON pointer of the suspend flag, if the kind has one.
    pub fn suspend_pointer(&self) -> Option<&'static str> {
        match self.shape {
            Shape::Job | Shape::JobSet => Some("/spec/suspend"),
            Shape::Kubeflow => Some("/spec/runPolicy/suspend"),
            Shape::Pod => None,
        }
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

fn time(v: Option<&Value>) -> Option<Timestamp> {
    v.and_then(Value::as_str).and_then(|s| Timestamp::parse(s).ok())
}

fn count(v: Option<i64>, default: i64) -> u32 {
    u32::try_from(v.unwrap_or(default).max(0)).unwrap_or(0)
}

fn pod_spec(template: &Value) -> PodSpec {
    template.get("spec").and_then(|s| serde_json::from_value(s.clone()).ok()).unwrap_or_default()
}

/// A Job's running pods: `parallelism` (default 1), at most `completions`.
fn job_pods(spec: &Value) -> u32 {
    let parallelism = count(int(spec.get("parallelism")), 1);
    match int(spec.get("completions")) {
        Some(c) => parallelism.min(count(Some(c), 1)),
        None => parallelism,
    }
}

/// The pod templates of `obj` with how many pods each runs at once, as JSON.
pub fn templates(kind: &Kind, obj: &Value) -> Vec<(u32, Value)> {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    match kind.shape {
        Shape::Pod => vec![(1, obj.clone())],
        Shape::Job => vec![(job_pods(&spec), spec.get("template").cloned().unwrap_or(Value::Null))],
        Shape::JobSet => spec
            .get("replicatedJobs")
            .and_then(Value::as_array)
            .map(|jobs| {
                jobs.iter()
                    .map(|rj| {
                        let replicas = count(int(rj.get("replicas")), 1);
                        let job = rj.pointer("/template/spec").cloned().unwrap_or(Value::Null);
                        (replicas.saturating_mul(job_pods(&job)), job.get("template").cloned().unwrap_or(Value::Null))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        Shape::Kubeflow => replica_specs(&spec)
            .map(|(_, rs)| (count(int(rs.get("replicas")), 1), rs.get("template").cloned().unwrap_or(Value::Null)))
            .collect(),
    }
}

fn replica_specs(spec: &Value) -> impl Iterator<Item = (&String, &Value)> {
    spec.as_object()
        .into_iter()
        .flat_map(|m| m.iter())
        .filter(|(k, _)| k.ends_with("ReplicaSpecs"))
        .filter_map(|(_, v)| v.as_object())
        .flat_map(|m| m.iter())
}

/// The JSON pointers of every pod template's `metadata` in `obj` (where bursar's label goes, so
/// every pod carries it).
pub fn template_pointers(kind: &Kind, obj: &Value) -> Vec<String> {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let escape = |s: &str| s.replace('~', "~0").replace('/', "~1");
    match kind.shape {
        Shape::Pod => Vec::new(),
        Shape::Job => vec!["/spec/template/metadata".into()],
        Shape::JobSet => (0..spec.get("replicatedJobs").and_then(Value::as_array).map_or(0, Vec::len))
            .map(|i| format!("/spec/replicatedJobs/{i}/template/spec/template/metadata"))
            .collect(),
        Shape::Kubeflow => {
            let mut out = Vec::new();
            if let Some(m) = spec.as_object() {
                for (field, roles) in m.iter().filter(|(k, _)| k.ends_with("ReplicaSpecs")) {
                    for role in roles.as_object().into_iter().flat_map(|r| r.keys()) {
                        out.push(format!("/spec/{}/{}/template/metadata", escape(field), escape(role)));
                    }
                }
            }
            out
        }
    }
}

/// The pod sets of `obj` as the mapping reads them.
pub fn shapes(kind: &Kind, obj: &Value, mapping: &Mapping) -> Vec<PodShape> {
    templates(kind, obj).iter().map(|(n, t)| PodShape::of(*n, &pod_spec(t), mapping)).collect()
}

/// Seconds `obj` may run, from its own spec: a Job's `activeDeadlineSeconds`, the Kubeflow
/// `runPolicy.activeDeadlineSeconds`, a Pod's `activeDeadlineSeconds`, or Kueue's label.
pub fn max_seconds(kind: &Kind, obj: &Value) -> Option<i64> {
    let own = match kind.shape {
        Shape::Job | Shape::Pod => obj.pointer("/spec/activeDeadlineSeconds"),
        Shape::Kubeflow => obj.pointer("/spec/runPolicy/activeDeadlineSeconds"),
        Shape::JobSet => None,
    };
    int(own).or_else(|| {
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(MAX_EXEC_LABEL))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
    })
}

/// Whether `obj` is suspended (or, for a Pod, gated by bursar).
pub fn is_suspended(kind: &Kind, obj: &Value) -> bool {
    match kind.suspend_pointer() {
        Some(p) => obj.pointer(p).and_then(Value::as_bool).unwrap_or(false),
        None => obj
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| g.iter().any(|x| x.get("name").and_then(Value::as_str) == Some(GATE))),
    }
}

fn conditions(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten()
}

fn true_condition<'a>(obj: &'a Value, kinds: &[&str]) -> Option<(&'a str, &'a Value)> {
    conditions(obj).find_map(|c| {
        let t = c.get("type").and_then(Value::as_str)?;
        (kinds.contains(&t) && c.get("status").and_then(Value::as_str) == Some("True")).then_some((t, c))
    })
}

/// An annotation of `obj`.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str)
}

/// The annotation that marks an object suspended by bursar's reclaim (its value: the decision).
pub const RECLAIMED: &str = "bursar.dev/reclaimed";
/// The annotation that marks an object held by bursar (`approval`, `defer`).
pub const HOLD: &str = "bursar.dev/hold";
/// The annotation giving when a deferred object may start (RFC 3339).
pub const UNTIL: &str = "bursar.dev/until";
/// The annotation naming the decision that held an object.
pub const DECISION: &str = "bursar.dev/decision";

/// The lifecycle view of a webhook-admitted object (`job_id` from its `bursar.dev/job`).
pub fn unit_view(kind: &Kind, obj: &Value, job_id: &str, mapping: &Mapping) -> UnitView {
    let meta = |k: &str| obj.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or("").to_owned();
    let expected = templates(kind, obj)
        .iter()
        .filter(|(_, t)| !crate::gpus::pod_gpus(&pod_spec(t), mapping).is_zero() || kind.shape == Shape::Pod)
        .map(|(n, _)| *n)
        .fold(0, u32::saturating_add);
    let (done, failed): (&[&str], &[&str]) = match kind.shape {
        Shape::Job => (&["Complete"], &["Failed"]),
        Shape::JobSet => (&["Completed"], &["Failed"]),
        Shape::Kubeflow => (&["Succeeded"], &["Failed"]),
        Shape::Pod => (&[], &[]),
    };
    let end = if kind.shape == Shape::Pod {
        match obj.pointer("/status/phase").and_then(Value::as_str) {
            Some(p @ ("Succeeded" | "Failed")) => Some(End {
                at: pod_end(obj).unwrap_or(Timestamp(0)),
                status: if p == "Succeeded" { FinishStatus::Succeeded } else { FinishStatus::Failed },
                reason: p.to_owned(),
            }),
            _ => None,
        }
    } else {
        let completion = time(obj.pointer("/status/completionTime"));
        true_condition(obj, done)
            .map(|(_, c)| (FinishStatus::Succeeded, c))
            .or_else(|| true_condition(obj, failed).map(|(_, c)| (FinishStatus::Failed, c)))
            .map(|(status, c)| End {
                at: completion.or_else(|| time(c.get("lastTransitionTime"))).unwrap_or(Timestamp(0)),
                status,
                reason: c.get("reason").and_then(Value::as_str).unwrap_or("").to_owned(),
            })
    };
    let stopped = (end.is_none() && is_suspended(kind, obj)).then(|| {
        let reclaimed = annotation(obj, RECLAIMED).is_some();
        Stop {
            at: true_condition(obj, &["Suspended"]).and_then(|(_, c)| time(c.get("lastTransitionTime"))),
            for_good: reclaimed,
            reason: if reclaimed { "ReclaimedByBursar".into() } else { "Suspended".into() },
        }
    });
    UnitView {
        job_id: job_id.to_owned(),
        namespace: meta("namespace"),
        kind: kind.name().to_owned(),
        name: meta("name"),
        expected_pods: expected,
        admitted: true,
        end,
        stopped,
        waits: None,
    }
}

/// When a terminated pod's last container finished.
pub fn pod_end(pod: &Value) -> Option<Timestamp> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| time(c.pointer("/state/terminated/finishedAt")))
        .max()
}

/// Labels of an object.
pub fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

/// Annotations of an object.
pub fn annotations(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::Gpus;
    use serde_json::json;

    #[test]
    fn kinds_are_named_as_a_site_writes_them() {
        assert_eq!(Kind::parse("batch/v1/Job").unwrap().shape, Shape::Job);
        assert_eq!(Kind::parse("v1/Pod").unwrap().plural, "pods");
        assert_eq!(Kind::parse("PyTorchJob").unwrap().suspend_pointer(), Some("/spec/runPolicy/suspend"));
        let e = Kind::parse("apps/v1/Deployment").unwrap_err();
        assert!(e.contains("not a kind") && e.contains("batch/v1/Job"), "{e}");
    }

    #[test]
    fn templates_of_every_shape() {
        let gpu = json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}});
        let job = json!({"spec": {"parallelism": 4, "completions": 3, "template": gpu}});
        let k = Kind::parse("batch/v1/Job").unwrap();
        let m = Mapping::default();
        let s = shapes(&k, &job, &m);
        assert_eq!((s[0].count, s[0].gpus), (3, Gpus::whole(2)));
        let js = json!({"spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": gpu}}}]}});
        let k = Kind::parse("JobSet").unwrap();
        assert_eq!(shapes(&k, &js, &m)[0].count, 4);
        assert_eq!(template_pointers(&k, &js), ["/spec/replicatedJobs/0/template/spec/template/metadata"]);
        let pt = json!({"spec": {"runPolicy": {"suspend": true}, "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": gpu}, "Worker": {"replicas": 3, "template": gpu}}}});
        let k = Kind::parse("PyTorchJob").unwrap();
        let total: Gpus = shapes(&k, &pt, &m).iter().map(|s| s.gpus.saturating_mul(s.count)).sum();
        assert_eq!(total, 8);
        assert!(is_suspended(&k, &pt));
        assert_eq!(template_pointers(&k, &pt).len(), 2);
    }

    #[test]
    fn a_job_ends_and_is_suspended_as_its_conditions_say() {
        let k = Kind::parse("batch/v1/Job").unwrap();
        let mut job = json!({"metadata": {"name": "train", "namespace": "nlp"}, "spec": {"suspend": true, "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
            "status": {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime": "2026-11-30T09:00:00Z"}]}});
        let u = unit_view(&k, &job, "kube-1", &Mapping::default());
        assert_eq!(u.expected_pods, 1);
        let stop = u.stopped.unwrap();
        assert!(!stop.for_good);
        assert_eq!(stop.at.map(|t| t.to_string()).as_deref(), Some("2026-11-30T09:00:00Z"));
        job["metadata"]["annotations"] = json!({RECLAIMED: "d-1"});
        assert!(unit_view(&k, &job, "kube-1", &Mapping::default()).stopped.unwrap().for_good);
        job["spec"]["suspend"] = json!(false);
        job["status"] = json!({"completionTime": "2026-11-30T10:00:00Z", "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]});
        let end = unit_view(&k, &job, "kube-1", &Mapping::default()).end.unwrap();
        assert_eq!((end.status, end.at.to_string().as_str()), (FinishStatus::Succeeded, "2026-11-30T10:00:00Z"));
    }
}
