//! Shared set-up of the `kube_*` integration tests: the in-test Kubernetes API server
//! (`bursar_testkit::kubeapi`, objects written from the Kubernetes 1.33 and Kueue v0.13 v1beta1 API
//! references) with one user per agent, each held to the ClusterRole the shipped manifest
//! (`integrations/kubernetes/*.yaml`) grants it; the real `bursar kube …` agents as child processes;
//! `bursar serve` with a principal per agent; and the moves of the controllers the test plays
//! (Kueue reserving quota, admitting and evicting, the Job controller creating pods, the scheduler
//! binding them, the kubelet ending them).

#![allow(dead_code)]
#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure should stop the test with its message")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bursar_testkit::kubeapi::{self, KubeApi, PODS, Resource, WORKLOADS};
use serde_json::{Value, json};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A shipped manifest.
pub fn manifest(name: &str) -> String {
    std::fs::read_to_string(root().join("integrations/kubernetes").join(name)).unwrap()
}

/// A serve token of principal `name`.
pub fn token(name: &str) -> String {
    format!("bursar_test-{name}-token")
}

/// `[[principal]]` tables for `(name, roles, jobs)`.
pub fn principals(list: &[(&str, &[&str], &str)]) -> String {
    let mut text = String::from("[clock]\nmax_skew = \"5m\"\n\n[auth]\npeople = []\n\n");
    for (name, roles, jobs) in list {
        let hash = bursar_auth::TokenHash::of(&token(name)).to_text();
        text.push_str(&format!("[[principal]]\nname = \"{name}\"\nroles = {roles:?}\n"));
        if !jobs.is_empty() {
            text.push_str(&format!("jobs = [\"{jobs}\"]\n"));
        }
        text.push_str(&format!("tokens = [\"{hash}\"]\n\n"));
    }
    text
}

/// An agent process.
pub struct Agent {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Agent {
    /// Starts `bursar kube <args>` with its log in `dir`.
    pub fn start(dir: &Path, name: &str, args: &[String]) -> Agent {
        let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        let log = dir.join(format!("{name}-{n}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_bursar"))
            .arg("kube")
            .args(args)
            .args(["--log-level", "debug"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Agent { name: name.to_owned(), child, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no chance to save anything.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Panics with the log if the agent exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("bursar kube {} exited ({st}):\n{}", self.name, self.log_text());
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API server, with a user per agent held to its manifest ClusterRole.
pub struct Cluster {
    pub api: KubeApi,
    pub dir: PathBuf,
}

impl Cluster {
    /// Starts the API server; `users` are `(user, ClusterRole in manifest)`.
    pub fn start(dir: &Path, manifest_file: &str, users: &[(&str, &str)]) -> Cluster {
        let api = KubeApi::start().unwrap();
        api.add_user("test", &token("kube-test"), None);
        let text = manifest(manifest_file);
        for (user, role) in users {
            let rules = kubeapi::cluster_role_rules(&text, role);
            assert!(!rules.is_empty(), "no ClusterRole {role} in {manifest_file}");
            api.add_user(user, &token(user), Some(rules));
        }
        api.set_bookmarks(Some(Duration::from_millis(300)));
        Cluster { api, dir: dir.to_owned() }
    }

    /// The kubeconfig of `user`.
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        let dir = self.dir.join(format!("kube-{user}"));
        std::fs::create_dir_all(&dir).unwrap();
        self.api.write_kubeconfig(&dir, &token(user)).unwrap()
    }

    /// Every request a user made that was refused by RBAC (403).
    pub fn forbidden(&self) -> Vec<String> {
        self.api
            .seen()
            .into_iter()
            .filter(|s| s.status == 403)
            .map(|s| format!("{} {} {} ({})", s.user, s.method, s.target, s.verb))
            .collect()
    }

    /// Waits for `f`, panicking with `what` and the agents' logs.
    pub fn wait<T>(&self, secs: u64, what: &str, agents: &[&Agent], mut f: impl FnMut(&KubeApi) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f(&self.api) {
                return v;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> =
                    agents.iter().map(|a| format!("--- {} ---\n{}", a.name, a.log_text())).collect();
                panic!("timed out waiting for {what}\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // --- Kueue, the Job controller, the scheduler and the kubelet, as the test plays them. ---

    /// A Job and the Workload Kueue makes for it: `pods` pods of `gpus` GPUs each.
    pub fn submit_workload(
        &self,
        ns: &str,
        name: &str,
        pods: u32,
        gpus: u32,
        labels: Value,
        annotations: Value,
    ) -> (String, String) {
        self.submit_workload_with(ns, name, pods, json!({"nvidia.com/gpu": gpus.to_string()}), labels, annotations)
    }

    /// As [`Cluster::submit_workload`], each pod's resource `limits` (and requests) given (MIG
    /// slices: `{"nvidia.com/mig-1g.10gb": "2"}`).
    pub fn submit_workload_with(
        &self,
        ns: &str,
        name: &str,
        pods: u32,
        limits: Value,
        labels: Value,
        annotations: Value,
    ) -> (String, String) {
        let job = self
            .api
            .create(
                kubeapi::JOBS,
                ns,
                json!({"metadata": {"name": name, "labels": labels.clone()}, "spec": {"suspend": true, "parallelism": pods, "completions": pods,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "registry.example/llm:1.4",
                        "resources": {"limits": limits.clone()}}]}}}}),
            )
            .unwrap();
        let job_uid = job["metadata"]["uid"].as_str().unwrap().to_owned();
        let wl = self
            .api
            .create(
                WORKLOADS,
                ns,
                json!({"metadata": {"name": format!("job-{name}-3f2a1"), "labels": merge(&labels, &json!({"kueue.x-k8s.io/job-uid": job_uid})),
                        "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid, "controller": true, "blockOwnerDeletion": true}]},
                    "spec": {"active": true, "queueName": "team", "podSets": [{"name": "main", "count": pods,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "registry.example/llm:1.4",
                            "resources": {"requests": limits.clone(), "limits": limits}}]}}}]}}),
            )
            .unwrap();
        (format!("job-{name}-3f2a1"), wl["metadata"]["uid"].as_str().unwrap().to_owned())
    }

    /// Kueue reserves quota on flavor `h100` and sets every admission check of the ClusterQueue
    /// (`bursar` and `provisioning`, already Ready) to its state.
    pub fn reserve_quota(&self, ns: &str, wl: &str, pods: u32) {
        self.reserve_quota_on(ns, wl, pods, json!({"nvidia.com/gpu": "h100"}));
    }

    /// As [`Cluster::reserve_quota`], on `flavors` (resource → flavor: `{"nvidia.com/mig-1g.10gb":
    /// "a100-mig"}`).
    pub fn reserve_quota_on(&self, ns: &str, wl: &str, pods: u32, flavors: Value) {
        let now = kubeapi::rfc3339(unix_now());
        self.api
            .update(WORKLOADS, ns, wl, true, json!({"status": {
                "admission": {"clusterQueue": "gpu", "podSetAssignments": [{"name": "main", "flavors": flavors, "count": pods}]},
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue gpu", "lastTransitionTime": now}],
                "admissionChecks": [{"name": "bursar", "state": "Pending", "message": "", "lastTransitionTime": now},
                                    {"name": "provisioning", "state": "Ready", "message": "", "lastTransitionTime": now}]}}))
            .unwrap();
    }

    /// The state and message of admission check `check`.
    pub fn check(&self, ns: &str, wl: &str, check: &str) -> Option<(String, String)> {
        let w = self.api.get(WORKLOADS, ns, wl)?;
        let c = w.pointer("/status/admissionChecks")?.as_array()?.iter().find(|c| c["name"] == check)?.clone();
        Some((c["state"].as_str()?.to_owned(), c["message"].as_str().unwrap_or("").to_owned()))
    }

    /// Kueue admits (every check Ready): the Admitted condition, the Job unsuspended.
    pub fn admit(&self, ns: &str, wl: &str, job: &str) {
        let now = kubeapi::rfc3339(unix_now());
        let conds = self.conditions(ns, wl, &[("Admitted", "True", "Admitted", &now)]);
        self.api.update(WORKLOADS, ns, wl, true, json!({"status": {"conditions": conds}})).unwrap();
        self.api.update(kubeapi::JOBS, ns, job, false, json!({"spec": {"suspend": false}})).unwrap();
    }

    fn conditions(&self, ns: &str, wl: &str, set: &[(&str, &str, &str, &str)]) -> Value {
        let w = self.api.get(WORKLOADS, ns, wl).unwrap();
        let mut conds: Vec<Value> =
            w.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        for (t, status, reason, at) in set {
            conds.retain(|c| c["type"] != *t);
            conds.push(
                json!({"type": t, "status": status, "reason": reason, "message": reason, "lastTransitionTime": at}),
            );
        }
        Value::Array(conds)
    }

    /// The Job controller creates pod `name` of Job `job` and the scheduler binds it at `at`.
    pub fn run_pod(&self, ns: &str, job: &str, name: &str, gpus: u32, at: i64) {
        self.run_pod_with(ns, job, name, json!({"nvidia.com/gpu": gpus.to_string()}), at);
    }

    /// As [`Cluster::run_pod`], its container's resource `limits` given (MIG slices:
    /// `{"nvidia.com/mig-1g.10gb": "2"}`).
    pub fn run_pod_with(&self, ns: &str, job: &str, name: &str, limits: Value, at: i64) {
        let j = self.api.get(kubeapi::JOBS, ns, job).unwrap();
        let uid = j["metadata"]["uid"].as_str().unwrap();
        let labels = j.pointer("/spec/template/metadata/labels").cloned().unwrap_or(json!({}));
        self.api
            .create(PODS, ns, json!({"metadata": {"name": name, "labels": merge(&labels, &json!({"batch.kubernetes.io/job-name": job})),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid, "controller": true}]},
                "spec": {"nodeName": "node1", "restartPolicy": "Never", "containers": [{"name": "trainer", "image": "registry.example/llm:1.4",
                    "resources": {"limits": limits}}]}}))
            .unwrap();
        let t = kubeapi::rfc3339(at);
        self.api
            .update(
                PODS,
                ns,
                name,
                true,
                json!({"status": {"phase": "Running", "startTime": t,
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": t}]}}),
            )
            .unwrap();
    }

    /// Kueue evicts (reason `reason`; `active: false` evictions are `InactiveWorkload`), the Job
    /// controller deletes the pods, Kueue clears the admission.
    pub fn evict(&self, ns: &str, wl: &str, job: &str, reason: &str, pods: &[&str]) {
        let now = kubeapi::rfc3339(unix_now());
        let conds = self.conditions(
            ns,
            wl,
            &[
                ("Evicted", "True", reason, &now),
                ("Admitted", "False", "NoReservation", &now),
                ("QuotaReserved", "False", "Pending", &now),
            ],
        );
        self.api.update(WORKLOADS, ns, wl, true, json!({"status": {"conditions": conds, "admission": null}})).unwrap();
        self.api.update(kubeapi::JOBS, ns, job, false, json!({"spec": {"suspend": true}})).unwrap();
        for p in pods {
            self.api.delete(PODS, ns, p).unwrap();
        }
    }

    /// Kueue requeues an evicted Workload: the eviction is over.
    pub fn requeue(&self, ns: &str, wl: &str) {
        let now = kubeapi::rfc3339(unix_now());
        let conds =
            self.conditions(ns, wl, &[("Evicted", "False", "Requeued", &now), ("Requeued", "True", "Preempted", &now)]);
        self.api.update(WORKLOADS, ns, wl, true, json!({"status": {"conditions": conds}})).unwrap();
    }

    /// Direct access for a test's own moves.
    pub fn update(&self, res: Resource, ns: &str, name: &str, status: bool, patch: Value) {
        self.api.update(res, ns, name, status, patch).unwrap();
    }
}

/// `a` with `b`'s keys added.
pub fn merge(a: &Value, b: &Value) -> Value {
    let mut out = a.clone();
    if !out.is_object() {
        out = json!({});
    }
    if let (Some(o), Some(b)) = (out.as_object_mut(), b.as_object()) {
        for (k, v) in b {
            o.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Seconds since the epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// bursar's job id of an object uid on cluster `cluster` (what the agents compute).
pub fn job_id(cluster: &str, uid: &str) -> String {
    bursar_kube::submit::job_id(cluster, uid)
}
