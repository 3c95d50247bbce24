//! What the pool has, read from Kueue and the nodes: the ClusterQueues' GPU quotas and usage, capped
//! by the nodes' allocatable GPUs, as `pool.inventory` rows (pure; `bursar kube watch` reads the
//! objects and sends the rows when they change, [`crate::watch`]).
//!
//! One row per ClusterQueue and GPU flavor (a flavor of its `spec.resourceGroups` that lists a
//! resource counting GPUs: a `--gpu-resource` name, `nvidia.com/gpu` by default, or a MIG slice,
//! `nvidia.com/mig-*`, [`crate::gpus`]). MIG slices count exactly as their share (wire format v1.x:
//! `"3/7"`): 14 `nvidia.com/mig-1g.10gb` are 2 GPUs, 3 of them 3/7, and so are the slices in use:
//!
//! | field | from |
//! |---|---|
//! | `queue` | the ClusterQueue's name |
//! | `gpu_type` | the flavor's node label naming the GPU model (`nvidia.com/gpu.product`), else the flavor's name: as `job.submitted` names it ([`crate::submit`]) |
//! | `in_service` | the flavor's `nominalQuota`, at most the allocatable GPUs of the Ready, schedulable nodes its `nodeLabels` select (when any node matches) |
//! | `drained` | the allocatable GPUs of the matching nodes that are cordoned (`spec.unschedulable`) or not Ready, at most what the quota leaves beyond `in_service` |
//! | `allocated` | `status.flavorsUsage` of the flavor's GPU resources (what admitted Workloads hold) |
//! | `free` | `in_service` − `allocated` |
//! | `backfill` | `spec.queueingStrategy`: `StrictFIFO` is `strict`, `BestEffortFIFO` (Kueue's default) `best_effort` |
//!
//! A job counts in a row when its `queue` is the row's: `job.submitted` names the Workload's
//! LocalQueue, so the estimate sees a ClusterQueue's jobs when its LocalQueues carry its name.

use std::collections::BTreeMap;

use bursar_model::{CapacityRow, Gpus};
use serde_json::Value;

use crate::submit::Mapping;

/// A whole number of a quantity (`"8"`, `8`); `None` for anything else (`"500m"`, `"1Ki"`).
fn count(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse::<u32>().ok(),
        _ => None,
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str)
}

/// A node as the inventory needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeGpus {
    labels: BTreeMap<String, String>,
    gpus: Gpus,
    usable: bool,
}

/// The GPUs in a map of quantities by resource (a node's `allocatable`, a flavor's `resources` as
/// `(name, quantity)`): Σ count × share over the resources that count; `None` when none is there.
fn gpus<'a>(mapping: &Mapping, quantities: impl Iterator<Item = (&'a str, &'a Value)>) -> Option<Gpus> {
    quantities.filter_map(|(r, q)| Some(mapping.gpu_share(r)?.saturating_mul(count(q)?))).reduce(Gpus::saturating_add)
}

/// A flavor's or usage's `resources` list (`[{"name": …, <field>: …}]`) as `(name, quantity)`.
fn named<'a>(list: Option<&'a Value>, field: &'a str) -> impl Iterator<Item = (&'a str, &'a Value)> {
    list.and_then(Value::as_array).into_iter().flatten().filter_map(move |r| Some((text(r, &["name"])?, r.get(field)?)))
}

fn node(n: &Value, mapping: &Mapping) -> Option<NodeGpus> {
    let allocatable = n.get("status")?.get("allocatable")?.as_object()?;
    let gpus = gpus(mapping, allocatable.iter().map(|(k, v)| (k.as_str(), v)))?;
    let labels = n
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    let cordoned = n.get("spec").and_then(|s| s.get("unschedulable")).and_then(Value::as_bool).unwrap_or(false);
    let ready = n
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| text(c, &["type"]) == Some("Ready")))
        .is_some_and(|c| text(c, &["status"]) == Some("True"));
    Some(NodeGpus { labels, gpus, usable: ready && !cordoned })
}

/// The rows of `cluster_queues` (their JSON), with `flavors` (ResourceFlavors) and `nodes` (Nodes),
/// for the GPU resources of `mapping` and its node label naming the GPU model, in `region`.
pub fn inventory(
    cluster_queues: &[Value],
    flavors: &[Value],
    nodes: &[Value],
    mapping: &Mapping,
    region: &str,
) -> Vec<CapacityRow> {
    let type_label = mapping.gpu_type_label.as_str();
    let nodes: Vec<NodeGpus> = nodes.iter().filter_map(|n| node(n, mapping)).collect();
    let flavor_labels = |name: &str| -> BTreeMap<String, String> {
        flavors
            .iter()
            .find(|f| text(f, &["metadata", "name"]) == Some(name))
            .and_then(|f| f.get("spec")?.get("nodeLabels")?.as_object())
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default()
    };
    let mut rows = Vec::new();
    for cq in cluster_queues {
        let Some(name) = text(cq, &["metadata", "name"]) else { continue };
        let backfill = match text(cq, &["spec", "queueingStrategy"]) {
            Some("StrictFIFO") => "strict",
            _ => "best_effort",
        };
        let usage = |flavor: &str| -> Gpus {
            let used = cq
                .get("status")
                .and_then(|s| s.get("flavorsUsage"))
                .and_then(Value::as_array)
                .and_then(|fs| fs.iter().find(|f| text(f, &["name"]) == Some(flavor)));
            gpus(mapping, named(used.and_then(|f| f.get("resources")), "total")).unwrap_or(Gpus::ZERO)
        };
        let groups = cq.get("spec").and_then(|s| s.get("resourceGroups")).and_then(Value::as_array);
        for group in groups.into_iter().flatten() {
            for f in group.get("flavors").and_then(Value::as_array).into_iter().flatten() {
                let Some(flavor) = text(f, &["name"]) else { continue };
                let Some(quota) = gpus(mapping, named(f.get("resources"), "nominalQuota")) else { continue };
                let labels = flavor_labels(flavor);
                let gpu_type = labels.get(type_label).cloned().unwrap_or_else(|| flavor.to_owned());
                let matching: Vec<&NodeGpus> = nodes
                    .iter()
                    .filter(|n| !labels.is_empty() && labels.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
                    .collect();
                let (in_service, drained) = if matching.is_empty() {
                    (quota, Gpus::ZERO)
                } else {
                    let up: Gpus = matching.iter().filter(|n| n.usable).map(|n| n.gpus).sum();
                    let down: Gpus = matching.iter().filter(|n| !n.usable).map(|n| n.gpus).sum();
                    let in_service = quota.min(up);
                    (in_service, down.min(quota.saturating_sub(in_service)))
                };
                let allocated = usage(flavor);
                rows.push(CapacityRow {
                    region: region.to_owned(),
                    gpu_type,
                    queue: name.to_owned(),
                    in_service,
                    allocated,
                    free: in_service.saturating_sub(allocated),
                    drained,
                    backfill: Some(backfill.to_owned()),
                });
            }
        }
    }
    rows.sort_by(|a, b| (&a.queue, &a.gpu_type).cmp(&(&b.queue, &b.gpu_type)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Objects as the Kubernetes 1.33 and Kueue v0.13 v1beta1 references write them.
    fn cluster_queue(name: &str, strategy: &str, quota: &str, used: u32) -> Value {
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"queueingStrategy": strategy, "namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [{"name": "h100", "resources": [
                    {"name": "cpu", "nominalQuota": "64"}, {"name": "nvidia.com/gpu", "nominalQuota": quota}]}]}]},
            "status": {"pendingWorkloads": 2, "admittedWorkloads": 1, "flavorsUsage": [{"name": "h100", "resources": [
                {"name": "cpu", "total": "8"}, {"name": "nvidia.com/gpu", "total": used.to_string()}]}]}
        })
    }

    fn gpu_node(name: &str, gpus: u32, ready: bool, cordoned: bool) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": gpus.to_string()},
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        })
    }

    #[test]
    fn a_cluster_queues_quota_capped_by_its_nodes_with_the_cordoned_one_drained() {
        let flavor = json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
            "metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}});
        // Quota 24; nodes: 8 Ready, 8 Ready, 8 cordoned, 8 not Ready: 16 in service, 8 of the 16 down
        // within what the quota leaves (24 − 16). 6 used: 10 free. StrictFIFO: strict.
        let nodes = [
            gpu_node("n1", 8, true, false),
            gpu_node("n2", 8, true, false),
            gpu_node("n3", 8, true, true),
            gpu_node("n4", 8, false, false),
        ];
        let rows = inventory(
            &[cluster_queue("team-nlp", "StrictFIFO", "24", 6)],
            &[flavor],
            &nodes,
            &Mapping::default(),
            "gpu-a",
        );
        assert_eq!(
            rows,
            [CapacityRow {
                region: "gpu-a".into(),
                gpu_type: "NVIDIA-H100-80GB-HBM3".into(),
                queue: "team-nlp".into(),
                in_service: Gpus::whole(16),
                allocated: Gpus::whole(6),
                free: Gpus::whole(10),
                drained: Gpus::whole(8),
                backfill: Some("strict".into()),
            }]
        );
    }

    #[test]
    fn without_nodes_or_labels_the_quota_is_the_capacity_and_the_flavor_names_the_type() {
        let rows =
            inventory(&[cluster_queue("team-cv", "BestEffortFIFO", "8", 8)], &[], &[], &Mapping::default(), "gpu-a");
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            (r.gpu_type.as_str(), r.in_service, r.allocated, r.free, r.backfill.as_deref()),
            ("h100", Gpus::whole(8), Gpus::whole(8), Gpus::ZERO, Some("best_effort"))
        );
    }

    #[test]
    fn mig_slices_count_as_their_share() {
        // A100 nodes in the mixed strategy: one with 2 GPUs cut in sevenths (14 slices) and one whole
        // GPU, one with 3 slices left (3/7). The flavor's quota: 21 slices (3 GPUs) and 1 GPU; 8
        // slices in use: 8/7.
        let node = |name: &str, alloc: Value| {
            json!({"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
                   "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}})
        };
        let nodes = [
            node("n1", json!({"cpu": "64", "nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "14"})),
            node("n2", json!({"nvidia.com/mig-1g.10gb": "3"})),
            node("cpu", json!({"cpu": "64"})),
        ];
        let flavor = json!({"metadata": {"name": "a100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}});
        let cq = json!({"metadata": {"name": "team-cv"},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"], "flavors": [{"name": "a100", "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "1"}, {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "21"}]}]}]},
            "status": {"flavorsUsage": [{"name": "a100", "resources": [{"name": "nvidia.com/mig-1g.10gb", "total": "8"}]}]}});
        let rows = inventory(&[cq], &[flavor], &nodes, &Mapping::default(), "gpu-a");
        let r = &rows[0];
        // Quota 1 + 21/7 = 4; nodes 1 + 2 + 3/7 = 24/7 in service; 8/7 used; 16/7 free.
        let counts = [r.in_service, r.allocated, r.free, r.drained].map(|g| g.to_string());
        assert_eq!(
            (r.gpu_type.as_str(), counts),
            ("NVIDIA-A100-SXM4-80GB", ["24/7", "8/7", "16/7", "0"].map(String::from))
        );
    }
}
