//! Kueue's API objects the agents read and write, `kueue.x-k8s.io/v1beta1`, written by hand from
//! Kueue's API reference (v0.13, `apis/kueue/v1beta1/workload_types.go`, `admissioncheck_types.go`,
//! `resourceflavor_types.go`): only the fields bursar reads, every other field is ignored on reading
//! and never written (writes are patches naming only bursar's own fields).
//!
//! Each type implements `k8s_openapi`'s `Resource` and `Metadata`, which is all kube-rs needs for a
//! typed `Api<Workload>`; no CRD is generated from them (Kueue installs its own).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// Kueue's API group.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The version read and written.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of every Kueue object here.
pub const API_VERSION: &str = "kueue.x-k8s.io/v1beta1";

macro_rules! kueue_resource {
    ($ty:ident, $kind:literal, $list:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = API_VERSION;
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = VERSION;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }
        impl k8s_openapi::ListableResource for $ty {
            const LIST_KIND: &'static str = $list;
        }
        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A Kueue `Workload`: the unit Kueue admits, one per Job (or JobSet, PyTorchJob, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// Name, namespace, labels, owner references, uid, resourceVersion.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What it asks for.
    #[serde(default)]
    pub spec: WorkloadSpec,
    /// What Kueue and the admission checks made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadStatus>,
}
kueue_resource!(Workload, "Workload", "WorkloadList", "workloads", k8s_openapi::NamespaceResourceScope);

/// `Workload.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// The pod sets: each a pod template and how many pods of it.
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
    /// The LocalQueue it was submitted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    /// `false` when deactivated (evicted and kept out of the queue); absent means `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// The longest it may run, from the Job's `kueue.x-k8s.io/max-exec-time-seconds` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_execution_time_seconds: Option<i64>,
    /// Priority class name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// One pod set of a Workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// The pod set's name (`main`, `launcher`, `worker`).
    #[serde(default)]
    pub name: String,
    /// Pods of this template.
    #[serde(default)]
    pub count: i32,
    /// The pod template.
    #[serde(default)]
    pub template: PodTemplateSpec,
}

/// `Workload.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Set once quota is reserved: the ClusterQueue and, per pod set, the flavors and counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// `QuotaReserved`, `Admitted`, `PodsReady`, `Evicted`, `Preempted`, `Requeued`, `Finished`, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per admission check of its ClusterQueue (`listType=map`, key `name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckState>,
}

/// `Workload.status.admission`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// The ClusterQueue that reserved the quota.
    #[serde(default)]
    pub cluster_queue: String,
    /// Per pod set: flavors by resource and the admitted count.
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

/// One pod set's assignment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    /// The pod set.
    #[serde(default)]
    pub name: String,
    /// ResourceFlavor name by resource (`nvidia.com/gpu` → `h100`).
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    /// Pods admitted (fewer than asked with partial admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
}

/// The state of one admission check on a Workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckState {
    /// Not decided yet: Kueue keeps the quota reserved and waits.
    #[default]
    Pending,
    /// Passed: Kueue admits once every check is Ready.
    Ready,
    /// Not now: Kueue releases the quota and queues the Workload again.
    Retry,
    /// Refused: Kueue deactivates the Workload.
    Rejected,
}

impl CheckState {
    /// Kueue's word.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckState::Pending => "Pending",
            CheckState::Ready => "Ready",
            CheckState::Retry => "Retry",
            CheckState::Rejected => "Rejected",
        }
    }
}

/// `Workload.status.admissionChecks[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckState {
    /// The AdmissionCheck's name.
    pub name: String,
    /// Its state.
    #[serde(default)]
    pub state: CheckState,
    /// When the state last changed (required by the API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Why, for people (`kubectl describe workload`).
    #[serde(default)]
    pub message: String,
}

/// A Kueue `AdmissionCheck` (cluster-scoped): names the controller that decides it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheck {
    /// Name (what ClusterQueues list in `spec.admissionChecks`).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The controller's name.
    #[serde(default)]
    pub spec: AdmissionCheckSpec,
    /// `Active` condition, set by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AdmissionCheckStatus>,
}
kueue_resource!(
    AdmissionCheck,
    "AdmissionCheck",
    "AdmissionCheckList",
    "admissionchecks",
    k8s_openapi::ClusterResourceScope
);

/// `AdmissionCheck.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckSpec {
    /// The controller that decides this check (bursar's: [`crate::CONTROLLER_NAME`]).
    #[serde(default)]
    pub controller_name: String,
}

/// `AdmissionCheck.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckStatus {
    /// `Active`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A Kueue `ResourceFlavor` (cluster-scoped): the node labels of a kind of node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavor {
    /// Name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Node labels.
    #[serde(default)]
    pub spec: ResourceFlavorSpec,
}
kueue_resource!(
    ResourceFlavor,
    "ResourceFlavor",
    "ResourceFlavorList",
    "resourceflavors",
    k8s_openapi::ClusterResourceScope
);

/// `ResourceFlavor.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// Labels of the flavor's nodes (`nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`).
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
}

/// The status of a condition, `True`/`False`/`Unknown`.
pub fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}

/// Whether condition `kind` is `True`.
pub fn is_true(conditions: &[Condition], kind: &str) -> bool {
    condition(conditions, kind).is_some_and(|c| c.status == "True")
}

impl Workload {
    /// The conditions (none when there is no status).
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }

    /// The state of admission check `name`, if the Workload has it.
    pub fn check(&self, name: &str) -> Option<&AdmissionCheckState> {
        self.status.as_ref()?.admission_checks.iter().find(|c| c.name == name)
    }

    /// Whether the Workload is active (`spec.active` absent or true).
    pub fn is_active(&self) -> bool {
        self.spec.active.unwrap_or(true)
    }

    /// Whether quota is reserved now.
    pub fn quota_reserved(&self) -> bool {
        is_true(self.conditions(), "QuotaReserved")
    }
}

#[cfg(test)]
pub(crate) mod tests_data {
    /// A Workload as Kueue v0.13 writes it for a batch/v1 Job with one GPU pod set, quota reserved
    /// in ClusterQueue `gpu` on flavor `h100`, bursar's check pending (from Kueue's API reference
    /// and `kubectl get workload -o json`).
    pub(crate) const WORKLOAD: &str = r#"{
      "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
      "metadata": {"name": "job-train-3f2a1", "namespace": "nlp", "uid": "5d1c0f6e-8f0b-4b7e-9a43-0c6c1e0a7b11",
        "resourceVersion": "4711", "labels": {"kueue.x-k8s.io/job-uid": "0b8d0c5e-1111-4c3a-8e2e-55aa2c9d0f00"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "0b8d0c5e-1111-4c3a-8e2e-55aa2c9d0f00", "controller": true, "blockOwnerDeletion": true}]},
      "spec": {"active": true, "queueName": "team-nlp", "podSets": [{"name": "main", "count": 2,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "registry/llm:1.4",
          "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}]}}}]},
      "status": {
        "admission": {"clusterQueue": "gpu", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default", "nvidia.com/gpu": "h100"}, "resourceUsage": {"nvidia.com/gpu": "8"}, "count": 2}]},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue gpu", "lastTransitionTime": "2026-11-30T09:00:00Z"}],
        "admissionChecks": [{"name": "bursar", "state": "Pending", "lastTransitionTime": "2026-11-30T09:00:00Z", "message": ""},
                            {"name": "provisioning", "state": "Ready", "lastTransitionTime": "2026-11-30T09:00:01Z", "message": "capacity"}]}
    }"#;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tests_data::WORKLOAD;

    #[test]
    fn reads_a_workload_as_kueue_writes_it() {
        let w: Workload = serde_json::from_str(WORKLOAD).unwrap();
        assert_eq!(w.spec.pod_sets[0].count, 2);
        assert_eq!(w.spec.queue_name.as_deref(), Some("team-nlp"));
        assert!(w.is_active() && w.quota_reserved());
        assert_eq!(w.check("bursar").map(|c| c.state), Some(CheckState::Pending));
        assert_eq!(w.check("provisioning").map(|c| c.state), Some(CheckState::Ready));
        let a = w.status.as_ref().and_then(|s| s.admission.as_ref()).unwrap();
        assert_eq!(a.pod_set_assignments[0].flavors["nvidia.com/gpu"], "h100");
        let back = serde_json::to_value(&w).unwrap();
        assert_eq!(back["status"]["admissionChecks"][0]["state"], "Pending");
        assert_eq!(
            back["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            "4"
        );
    }
}
