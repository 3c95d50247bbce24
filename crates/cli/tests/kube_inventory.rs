//! The pool's inventory from Kubernetes (issue 53, item 1): the real `bursar kube watch` against the
//! in-test API server, held to the ClusterRole `integrations/kubernetes/kueue.yaml` grants it, reads
//! a ClusterQueue's GPU quota and usage, its flavor and the nodes' allocatable `nvidia.com/gpu`, and
//! sends `pool.inventory` to the real `bursar serve`; a node cordoned later changes the row, and the
//! watcher sends it again.
//!
//! By hand: ClusterQueue `team-nlp` (StrictFIFO) has a quota of 24 H100s; three Ready nodes of 8:
//! 24 in service, 6 used by admitted Workloads, 18 free. Then n3 is cordoned: 16 in service, 8
//! drained, 10 free.

use crate::kube_support::{Agent, Cluster, principals, token};
use crate::serve_support::{Scratch, Server};
use bursar_testkit::kubeapi::{CLUSTER_QUEUES, NODES, RESOURCE_FLAVORS};
use serde_json::{Value, json};

fn node(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
           "spec": {}})
}

fn node_status() -> Value {
    json!({"status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"},
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

#[test]
fn the_watcher_reads_cluster_queues_and_nodes_into_the_inventory() {
    let s = Scratch::new("kube-inventory");
    let dir = s.0.clone();
    let cluster = Cluster::start(&dir, "kueue.yaml", &[("watch", "bursar-kube-watch")]);
    let api = &cluster.api;
    api.create(
        RESOURCE_FLAVORS,
        "",
        json!({"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}),
    )
    .unwrap();
    for n in ["n1", "n2", "n3"] {
        api.create(NODES, "", node(n)).unwrap();
        api.update(NODES, "", n, true, node_status()).unwrap();
    }
    api.create(
        CLUSTER_QUEUES,
        "",
        json!({"metadata": {"name": "team-nlp"}, "spec": {"queueingStrategy": "StrictFIFO", "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100",
                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "24"}]}]}]}}),
    )
    .unwrap();
    api.update(
        CLUSTER_QUEUES,
        "",
        "team-nlp",
        true,
        json!({"status": {"admittedWorkloads": 1, "flavorsUsage": [{"name": "h100",
            "resources": [{"name": "nvidia.com/gpu", "total": "6"}]}]}}),
    )
    .unwrap();

    let config = dir.join("bursar.toml");
    std::fs::write(&config, principals(&[("kube-agents", &["producer"], "gpu-a-*"), ("reader", &["reader"], "")]))
        .unwrap();
    let mut server = Server::start(&s, &["--config", config.to_str().unwrap()]);
    server.token = Some(token("reader"));
    let token_file = dir.join("kube-agents.token");
    std::fs::write(&token_file, token("kube-agents")).unwrap();
    let state = dir.join("watch.json");
    let watch = Agent::start(
        &dir,
        "watch",
        &[
            "watch".to_owned(),
            "--cluster".into(),
            "gpu-a".into(),
            "--kubeconfig".into(),
            cluster.kubeconfig("watch").display().to_string(),
            "--server".into(),
            server.addr.to_string(),
            "--token-file".into(),
            token_file.display().to_string(),
            "--state".into(),
            state.display().to_string(),
            "--resync".into(),
            "200ms".into(),
            "--inventory-every".into(),
            "1".into(),
            "--region".into(),
            "cn-north".into(),
        ],
    );

    let row = |want: &dyn Fn(&Value) -> bool| {
        server.wait_for(30, "the inventory", || {
            let v = server.get_json("/v1/pool");
            let c = v["capacity"].as_array()?.first()?.clone();
            want(&c).then_some(c)
        })
    };
    let c = row(&|c| c["in_service"] == 24);
    assert_eq!(
        (c["region"].as_str(), c["gpu_type"].as_str(), c["queue"].as_str(), c["source"].as_str()),
        (Some("cn-north"), Some("NVIDIA-H100-80GB-HBM3"), Some("team-nlp"), Some("kube:gpu-a")),
        "{c}\n{}",
        watch.log_text()
    );
    assert_eq!(
        (c["allocated"].as_u64(), c["free"].as_u64(), c["drained"].as_u64()),
        (Some(6), Some(18), Some(0)),
        "{c}"
    );
    assert_eq!(c["backfill"], "strict", "{c}");

    // The kubelet's node n3 cordoned: its 8 GPUs drained.
    api.update(NODES, "", "n3", false, json!({"spec": {"unschedulable": true}})).unwrap();
    let c = row(&|c| c["in_service"] == 16);
    assert_eq!(
        (c["allocated"].as_u64(), c["free"].as_u64(), c["drained"].as_u64()),
        (Some(6), Some(10), Some(8)),
        "{c}"
    );
    assert!(cluster.forbidden().is_empty(), "the ClusterRole grants what the watcher reads: {:?}", cluster.forbidden());
}
