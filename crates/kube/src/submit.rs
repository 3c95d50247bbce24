//! From a Kubernetes object to bursar's `job.submitted`: the documented mapping (docs/integrations/
//! kubernetes.md, "What bursar reads from an object"). Pure: the admission check and the webhook
//! hand it an object and get the event, so the whole mapping is tested without a cluster.
//!
//! | bursar field        | from                                                                    |
//! |---------------------|-------------------------------------------------------------------------|
//! | `id`                | `<cluster>-<12 hex of SHA-256 of the object's uid>` (Workload), or of the AdmissionReview's request uid (webhook, where the object has no uid yet) |
//! | `project`           | the label `--project-label` names (when set and present), else the namespace |
//! | `user`              | webhook: the request's `userInfo.username`; Kueue: the `bursar.dev/user` label or annotation |
//! | `queue`             | the Workload's `spec.queueName`, or the `kueue.x-k8s.io/queue-name` label |
//! | `gpus`              | Σ pods × GPUs per pod, exact to a MIG slice: every `nvidia.com/mig-*` resource at its share (`2 × mig-1g.10gb` is `2/7`) and the `--gpu-resource` names (`nvidia.com/gpu`) as whole GPUs; limits, else requests; max with init containers ([`crate::gpus`]) |
//! | `nodes`             | pods that hold GPUs (an upper bound: pods may share a node)             |
//! | `gpu_type`          | the pod template's node selector `nvidia.com/gpu.product`, else the GPU flavor's node label, else the flavor's name |
//! | `gpu_mem_gb`        | the node selector or flavor label `nvidia.com/gpu.memory` (MiB) / 1024  |
//! | `requested_hours`   | `spec.maximumExecutionTimeSeconds`, the `kueue.x-k8s.io/max-exec-time-seconds` label, `activeDeadlineSeconds`, else `--default-hours` |
//! | `image`             | the first container that asks for GPUs                                  |
//! | `tags`              | labels `tags.bursar.dev/<key>: <value>`                                 |
//! | `stage`, `dataset`, `config`, `model_params_b`, `deferrable`, `ready` | annotations `bursar.dev/stage`, `…/dataset`, `…/config`, `…/model-params-b`, `…/deferrable: "true"`, `…/ready: "image,data,script"` |

use std::collections::BTreeMap;

use bursar_model::{Event, EventKind, Extra, Gpus, JobSpec, Ready, Timestamp};
use k8s_openapi::api::core::v1::PodSpec;
use sha2::{Digest, Sha256};

use crate::gpus::{MigShares, asks_for_gpus, pod_gpus};
use crate::kueue::Workload;

/// The annotation and label prefix bursar reads and writes.
pub const PREFIX: &str = "bursar.dev/";
/// The annotation (webhook: also a pod template label) that names an object's bursar job.
pub const JOB_KEY: &str = "bursar.dev/job";
/// The tag label prefix.
pub const TAG_PREFIX: &str = "tags.bursar.dev/";
/// Kueue's label for a Job's queue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's label for a Job's maximum execution time.
pub const MAX_EXEC_LABEL: &str = "kueue.x-k8s.io/max-exec-time-seconds";

/// How objects map to bursar's jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// The job id prefix (`--cluster`), also the `kube_cluster` field of every event.
    pub cluster: String,
    /// The extended resource that counts GPUs (`--gpu-resource`, the first when repeated): one is
    /// a whole GPU, or its share when its name holds a MIG profile. Every `nvidia.com/mig-*`
    /// resource counts as well, at its share ([`crate::gpus`]).
    pub gpu_resource: String,
    /// The other `--gpu-resource` names, counted as `gpu_resource` is.
    pub more_gpu_resources: Vec<String>,
    /// The site's MIG shares (`--mig-share PROFILE=SHARE`), over the built-in ones.
    pub mig_shares: MigShares,
    /// The node label naming the GPU model (GPU feature discovery's).
    pub gpu_type_label: String,
    /// The node label giving one GPU's memory in MiB.
    pub gpu_memory_label: String,
    /// The label that names the project, when the namespace is not the project.
    pub project_label: Option<String>,
    /// The label or annotation naming the user on a Workload (the webhook takes `userInfo`).
    pub user_key: String,
    /// Requested hours when the object names no time limit.
    pub default_hours: f64,
}

impl Default for Mapping {
    fn default() -> Mapping {
        Mapping {
            cluster: "kube".into(),
            gpu_resource: "nvidia.com/gpu".into(),
            more_gpu_resources: Vec::new(),
            mig_shares: MigShares::default(),
            gpu_type_label: "nvidia.com/gpu.product".into(),
            gpu_memory_label: "nvidia.com/gpu.memory".into(),
            project_label: None,
            user_key: "bursar.dev/user".into(),
            default_hours: 24.0,
        }
    }
}

/// bursar's job id for a key (an object's uid, or an admission request's uid).
pub fn job_id(cluster: &str, key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(cluster.len() + 13);
    out.push_str(cluster);
    out.push('-');
    for b in digest.iter().take(6) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The id of the `job.submitted` of job `job`: the same on every resend, so serve answers a resend
/// with the first decision.
pub fn submitted_id(job: &str) -> String {
    format!("{job}-submitted")
}

/// A pod quantity as a whole number: `4`, `4000m`. Anything else (fractions, suffixes) is `None`.
pub fn whole(q: &str) -> Option<u32> {
    if let Some(milli) = q.strip_suffix('m') {
        let m: u64 = milli.parse().ok()?;
        return m.is_multiple_of(1000).then(|| u32::try_from(m / 1000).ok()).flatten();
    }
    q.parse().ok()
}

/// What one set of identical pods asks for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodShape {
    /// Pods.
    pub count: u32,
    /// GPUs per pod.
    pub gpus: Gpus,
    /// The image of the first container asking for GPUs (or the first container).
    pub image: Option<String>,
    /// The template's node selector.
    pub node_selector: BTreeMap<String, String>,
    /// The template's `activeDeadlineSeconds`.
    pub active_deadline: Option<i64>,
}

impl PodShape {
    /// The shape of `count` pods of `spec`.
    pub fn of(count: u32, spec: &PodSpec, mapping: &Mapping) -> PodShape {
        let gpus = pod_gpus(spec, mapping);
        let image = spec
            .containers
            .iter()
            .find(|c| asks_for_gpus(c, mapping))
            .or(spec.containers.first())
            .and_then(|c| c.image.clone());
        PodShape {
            count,
            gpus,
            image,
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            active_deadline: spec.active_deadline_seconds,
        }
    }
}

/// Everything the mapping reads, whatever kind of object it came from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Submission {
    /// The key of the job id (object uid or request uid).
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Kind (`Workload`, `Job`, `Pod`, `JobSet`, `PyTorchJob`, …).
    pub kind: String,
    /// Name (may be empty for `generateName` at admission).
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// The user, when the API server said who (the webhook's `userInfo.username`).
    pub user: Option<String>,
    /// Queue.
    pub queue: Option<String>,
    /// Pod sets.
    pub pods: Vec<PodShape>,
    /// Seconds the object may run, from its own spec (`maximumExecutionTimeSeconds`, a Job's
    /// `activeDeadlineSeconds`).
    pub max_seconds: Option<i64>,
    /// Node labels of the GPU flavor Kueue assigned (with its name under `""`).
    pub flavor_labels: Option<(String, BTreeMap<String, String>)>,
}

impl Submission {
    /// The submission of a Workload; `flavor` is the GPU flavor's name and node labels, when Kueue
    /// has reserved quota on one (the caller reads the ResourceFlavor).
    pub fn of_workload(
        w: &Workload,
        mapping: &Mapping,
        flavor: Option<(String, BTreeMap<String, String>)>,
    ) -> Submission {
        let m = &w.metadata;
        let counts: BTreeMap<&str, i32> = w
            .status
            .as_ref()
            .and_then(|s| s.admission.as_ref())
            .map(|a| a.pod_set_assignments.iter().filter_map(|p| Some((p.name.as_str(), p.count?))).collect())
            .unwrap_or_default();
        let pods = w
            .spec
            .pod_sets
            .iter()
            .map(|ps| {
                let count = counts.get(ps.name.as_str()).copied().unwrap_or(ps.count);
                let spec = ps.template.spec.clone().unwrap_or_default();
                PodShape::of(u32::try_from(count).unwrap_or(0), &spec, mapping)
            })
            .collect();
        let labels = m.labels.clone().unwrap_or_default();
        let annotations = m.annotations.clone().unwrap_or_default();
        Submission {
            key: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            kind: "Workload".into(),
            name: m.name.clone().unwrap_or_default(),
            user: None,
            queue: w.spec.queue_name.clone().or_else(|| labels.get(QUEUE_LABEL).cloned()),
            labels,
            annotations,
            pods,
            max_seconds: w.spec.maximum_execution_time_seconds,
            flavor_labels: flavor,
        }
    }

    /// The pods that ask for GPUs.
    pub fn gpu_pods(&self) -> impl Iterator<Item = &PodShape> {
        self.pods.iter().filter(|p| !p.gpus.is_zero() && p.count > 0)
    }

    /// GPUs in total.
    pub fn gpus(&self) -> Gpus {
        self.gpu_pods().map(|p| p.gpus.saturating_mul(p.count)).sum()
    }

    fn node_label(&self, label: &str) -> Option<String> {
        self.gpu_pods()
            .find_map(|p| p.node_selector.get(label).cloned())
            .or_else(|| self.flavor_labels.as_ref().and_then(|(_, l)| l.get(label).cloned()))
    }

    /// The hours the job may run.
    pub fn requested_hours(&self, mapping: &Mapping) -> f64 {
        let from_label = self.labels.get(MAX_EXEC_LABEL).and_then(|v| v.parse::<i64>().ok());
        let from_pods = self.gpu_pods().filter_map(|p| p.active_deadline).max();
        match self.max_seconds.or(from_label).or(from_pods).filter(|s| *s > 0) {
            Some(s) => s as f64 / 3600.0,
            None => mapping.default_hours,
        }
    }

    /// The `job.submitted` of this submission at `now`, with the object's names as added fields.
    pub fn event(&self, mapping: &Mapping, now: Timestamp) -> Event {
        let id = job_id(&mapping.cluster, &self.key);
        let ann = |k: &str| self.annotations.get(&format!("{PREFIX}{k}")).filter(|v| !v.is_empty()).cloned();
        let project = mapping
            .project_label
            .as_ref()
            .and_then(|l| self.labels.get(l))
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| self.namespace.clone());
        let user = self.user.clone().or_else(|| {
            self.labels.get(&mapping.user_key).or_else(|| self.annotations.get(&mapping.user_key)).cloned()
        });
        let ready = match ann("ready") {
            None => Ready::default(),
            Some(list) => {
                let has = |w: &str| Some(list.split(',').any(|p| p.trim() == w));
                Ready { image: has("image"), data: has("data"), script: has("script"), extra: Vec::new() }
            }
        };
        let mut tags: Vec<(String, String)> = self
            .labels
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(TAG_PREFIX)?.to_owned(), v.clone())))
            .filter(|(k, _)| !k.is_empty())
            .collect();
        tags.sort();
        let gpu_type = self
            .node_label(&mapping.gpu_type_label)
            .or_else(|| self.flavor_labels.as_ref().map(|(name, _)| name.clone()).filter(|n| !n.is_empty()));
        let gpu_mem_gb = self
            .node_label(&mapping.gpu_memory_label)
            .and_then(|m| m.parse::<f64>().ok())
            .map(|mib| (mib / 1024.0).round());
        let job = JobSpec {
            id: id.clone(),
            project,
            user: user.unwrap_or_default(),
            queue: self.queue.clone(),
            gpus: self.gpus(),
            gpu_type,
            gpu_mem_gb,
            nodes: self.gpu_pods().map(|p| p.count).fold(0, u32::saturating_add).max(1),
            requested_hours: self.requested_hours(mapping),
            stage: ann("stage"),
            model_params_b: ann("model-params-b").and_then(|v| v.parse().ok()),
            image: self
                .gpu_pods()
                .find_map(|p| p.image.clone())
                .or_else(|| self.pods.iter().find_map(|p| p.image.clone())),
            dataset: ann("dataset"),
            config: ann("config"),
            ready,
            deferrable: ann("deferrable").is_some_and(|v| v == "true"),
            tags,
            ..JobSpec::default()
        };
        Event {
            id: submitted_id(&id),
            time: now,
            kind: EventKind::JobSubmitted(Box::new(job)),
            extra: self.fields(mapping),
        }
    }

    /// The added fields naming the object: `kube_cluster`, `kube_namespace`, `kube_kind`, `kube_name`.
    pub fn fields(&self, mapping: &Mapping) -> Extra {
        object_fields(&mapping.cluster, &self.namespace, &self.kind, &self.name)
    }
}

/// The added fields naming a Kubernetes object on every event and action record.
pub fn object_fields(cluster: &str, namespace: &str, kind: &str, name: &str) -> Extra {
    use bursar_agent::record::add_field;
    let mut extra = Extra::new();
    add_field(&mut extra, "kube_cluster", cluster);
    add_field(&mut extra, "kube_namespace", namespace);
    add_field(&mut extra, "kube_kind", kind);
    if !name.is_empty() {
        add_field(&mut extra, "kube_name", name);
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kueue::Workload;

    fn v(e: &Event) -> serde_json::Value {
        serde_json::to_value(e).unwrap()
    }

    #[test]
    fn a_workload_becomes_a_submission() {
        let mut w: Workload = serde_json::from_str(crate::kueue::tests_data::WORKLOAD).unwrap();
        let labels = w.metadata.labels.get_or_insert_default();
        labels.insert("tags.bursar.dev/team".into(), "search".into());
        labels.insert("bursar.dev/user".into(), "alice".into());
        w.metadata.annotations = Some(BTreeMap::from([
            ("bursar.dev/stage".into(), "finetune".into()),
            ("bursar.dev/ready".into(), "image, data".into()),
            ("bursar.dev/model-params-b".into(), "7".into()),
        ]));
        w.spec.maximum_execution_time_seconds = Some(4 * 3600);
        let m = Mapping { cluster: "gpu-a".into(), ..Mapping::default() };
        let flavor = (
            "h100".to_owned(),
            BTreeMap::from([
                ("nvidia.com/gpu.product".into(), "NVIDIA-H100-80GB-HBM3".into()),
                ("nvidia.com/gpu.memory".into(), "81559".into()),
            ]),
        );
        let s = Submission::of_workload(&w, &m, Some(flavor));
        let e = s.event(&m, Timestamp(1_796_018_054_000));
        let j = v(&e);
        let id = job_id("gpu-a", "5d1c0f6e-8f0b-4b7e-9a43-0c6c1e0a7b11");
        assert!(id.starts_with("gpu-a-") && id.len() == "gpu-a-".len() + 12, "{id}");
        assert_eq!(j["id"], format!("{id}-submitted"));
        assert_eq!(j["job"]["id"], id.as_str());
        assert_eq!(j["job"]["project"], "nlp", "the namespace is the project");
        assert_eq!(j["job"]["user"], "alice");
        assert_eq!(j["job"]["queue"], "team-nlp");
        assert_eq!(j["job"]["gpus"], 8, "2 pods x 4 GPUs");
        assert_eq!(j["job"]["nodes"], 2);
        assert_eq!(j["job"]["gpu_type"], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(j["job"]["gpu_mem_gb"], 80.0);
        assert_eq!(j["job"]["requested_hours"], 4.0);
        assert_eq!(j["job"]["stage"], "finetune");
        assert_eq!(j["job"]["image"], "registry/llm:1.4");
        assert_eq!(j["job"]["tags"]["team"], "search");
        assert_eq!(j["job"]["ready"]["image"], true);
        assert_eq!(j["job"]["ready"]["script"], false);
        assert_eq!(j["kube_namespace"], "nlp");
        assert_eq!(j["kube_kind"], "Workload");
        assert_eq!(j["kube_name"], "job-train-3f2a1");
        assert_eq!(bursar_model::decode_event(&e.to_json()).unwrap(), e, "a v1 event");
    }

    #[test]
    fn partial_admission_counts_what_kueue_admitted_and_a_project_label_wins() {
        let mut w: Workload = serde_json::from_str(crate::kueue::tests_data::WORKLOAD).unwrap();
        if let Some(a) = w.status.as_mut().and_then(|s| s.admission.as_mut()) {
            a.pod_set_assignments[0].count = Some(1);
        }
        w.metadata.labels.get_or_insert_default().insert("cost-centre".into(), "search".into());
        let m = Mapping { project_label: Some("cost-centre".into()), default_hours: 2.0, ..Mapping::default() };
        let j = v(&Submission::of_workload(&w, &m, Some(("h100".into(), BTreeMap::new()))).event(&m, Timestamp(0)));
        assert_eq!(j["job"]["gpus"], 4);
        assert_eq!(j["job"]["project"], "search");
        assert_eq!(j["job"]["gpu_type"], "h100", "the flavor's name when its nodes name no GPU model");
        assert_eq!(j["job"]["requested_hours"], 2.0, "no limit: the default");
        assert_eq!(j["job"]["user"], "");
    }

    #[test]
    fn a_workload_of_mig_slices_asks_for_their_share_on_its_flavor() {
        let text = crate::kueue::tests_data::WORKLOAD.replace("nvidia.com/gpu", "nvidia.com/mig-1g.10gb");
        let w: Workload = serde_json::from_str(&text).unwrap();
        let m = Mapping::default();
        let flavors = &w.status.as_ref().unwrap().admission.as_ref().unwrap().pod_set_assignments[0].flavors;
        let flavor = crate::gpus::gpu_flavor(flavors, &m).cloned();
        assert_eq!(flavor.as_deref(), Some("h100"), "the flavor of the slices");
        let s = Submission::of_workload(&w, &m, flavor.map(|f| (f, BTreeMap::new())));
        let j = v(&s.event(&m, Timestamp(0)));
        assert_eq!(j["job"]["gpus"], "8/7", "2 pods x 4 slices of 1/7");
        assert_eq!((j["job"]["nodes"].as_u64(), j["job"]["gpu_type"].as_str()), (Some(2), Some("h100")));
        assert_eq!(j["job"]["image"], "registry/llm:1.4");
    }

    #[test]
    fn quantities_and_init_containers() {
        assert_eq!(whole("4"), Some(4));
        assert_eq!(whole("2000m"), Some(2));
        assert_eq!(whole("1500m"), None);
        assert_eq!(whole("1k"), None);
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "6"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                           {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "2"}}},
                           {"name": "c"}]
        }))
        .unwrap();
        assert_eq!(pod_gpus(&spec, &Mapping::default()), 6, "the init container's 6 beats the containers' 4");
        let amd = Mapping { gpu_resource: "amd.com/gpu".into(), ..Mapping::default() };
        assert_eq!(pod_gpus(&spec, &amd), 0);
    }
}
