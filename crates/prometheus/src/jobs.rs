//! What the source asks its caller: which bursar job a key names and how many GPUs it should hold.
//!
//! The source never keeps job state of its own. The caller (`bursar serve`) implements [`Jobs`] over
//! the engine's view. Two ready adapters:
//!
//! - [`ByJobId`]: the key *is* bursar's job id (Kubernetes pods named after bursar jobs, a mapping
//!   file written with bursar's id, a push gateway). Wraps the `expected_gpus` lookup.
//! - [`SlurmIds`]: the key is Slurm's job id, what the prolog in `integrations/slurm/` writes into
//!   dcgm-exporter's mapping files; the index learns Slurm id → bursar id from the `job.started` and
//!   `job.finished` events `bursar slurm watch` sends (their `slurm_job_id` and `slurm_cluster`
//!   fields), so it rebuilds itself when serve replays its journal.
//! - [`KubePods`]: the key is `<namespace>/<pod>`, what dcgm-exporter on Kubernetes labels each GPU
//!   with (`namespace`, `pod`; [`crate::Attribution::kubernetes`]); the index learns a run's pods from
//!   the `kube_namespace` and `kube_pods` fields of the `job.started` events `bursar kube watch`
//!   sends, and forgets them when the run ends (`job.finished`, `job.requeued`).

use std::collections::HashMap;

use bursar_model::{Event, EventKind, Gpus};

/// The job a key names, as bursar knows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// bursar's job id, the `job_id` of the samples.
    pub job_id: String,
    /// GPUs bursar expects the job to hold (the job's `gpus`, exact to a MIG slice); a sample needs
    /// devices adding up to exactly this many (a MIG instance counts as its profile's share).
    pub gpus: Gpus,
}

/// The caller's view of running jobs.
pub trait Jobs {
    /// The running job `key` names, or `None` when bursar knows no running job by it (the series are
    /// skipped and counted as `unknown_job`).
    fn lookup(&self, key: &str) -> Option<Expected>;

    /// Calls `f(job_id, gpus)` for every running job with GPUs, so the source can count the ones
    /// Prometheus shows nothing for (`no_series`). Optional: the default offers none.
    fn for_each_running(&self, f: &mut dyn FnMut(&str, Gpus)) {
        let _ = f;
    }
}

/// Keys that are bursar job ids, looked up with `expected_gpus(job) -> Option<Gpus>`.
pub struct ByJobId<F>(pub F);

impl<F: Fn(&str) -> Option<Gpus>> Jobs for ByJobId<F> {
    fn lookup(&self, key: &str) -> Option<Expected> {
        (self.0)(key).map(|gpus| Expected { job_id: key.to_owned(), gpus })
    }
}

/// Slurm job id → bursar job id for one cluster, learnt from the watcher's events.
#[derive(Debug, Clone, Default)]
pub struct SlurmIds {
    cluster: String,
    by_slurm: HashMap<String, String>,
}

fn text_field(e: &Event, name: &str) -> Option<String> {
    let (_, raw) = e.extra.iter().find(|(k, _)| k == name)?;
    let v: serde_json::Value = serde_json::from_str(raw.get()).ok()?;
    match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl SlurmIds {
    /// An empty index for Slurm cluster `cluster` (the watcher's `--cluster`).
    pub fn new(cluster: impl Into<String>) -> SlurmIds {
        SlurmIds { cluster: cluster.into(), by_slurm: HashMap::new() }
    }

    /// The Slurm cluster it learns pairs of.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Learns from one event: a `job.started` of this cluster adds its pair, a `job.finished` removes
    /// it. Every other event is ignored.
    pub fn observe(&mut self, e: &Event) {
        let (start, job_id) = match &e.kind {
            EventKind::JobStarted { job_id, .. } => (true, job_id),
            EventKind::JobFinished { job_id, .. } => (false, job_id),
            _ => return,
        };
        if text_field(e, "slurm_cluster").as_deref() != Some(self.cluster.as_str()) {
            return;
        }
        let Some(slurm) = text_field(e, "slurm_job_id") else { return };
        if start {
            self.by_slurm.insert(slurm, job_id.clone());
        } else if self.by_slurm.get(&slurm) == Some(job_id) {
            self.by_slurm.remove(&slurm);
        }
    }

    /// bursar's id for Slurm job `slurm_id`.
    pub fn bursar_id(&self, slurm_id: &str) -> Option<&str> {
        self.by_slurm.get(slurm_id).map(String::as_str)
    }

    /// Every known pair, `(Slurm id, bursar id)`, in no particular order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_slurm.iter().map(|(s, b)| (s.as_str(), b.as_str()))
    }

    /// Jobs known (started and not finished).
    pub fn len(&self) -> usize {
        self.by_slurm.len()
    }

    /// True when no job is known.
    pub fn is_empty(&self) -> bool {
        self.by_slurm.is_empty()
    }

    /// A [`Jobs`] whose keys are Slurm ids, with `expected_gpus(bursar id)` from the engine.
    pub fn jobs<F: Fn(&str) -> Option<Gpus>>(&self, expected_gpus: F) -> SlurmJobs<'_, F> {
        SlurmJobs { ids: self, expected_gpus }
    }
}

/// [`SlurmIds::jobs`].
pub struct SlurmJobs<'a, F> {
    ids: &'a SlurmIds,
    expected_gpus: F,
}

impl<F: Fn(&str) -> Option<Gpus>> Jobs for SlurmJobs<'_, F> {
    fn lookup(&self, key: &str) -> Option<Expected> {
        let id = self.ids.bursar_id(key)?;
        (self.expected_gpus)(id).map(|gpus| Expected { job_id: id.to_owned(), gpus })
    }

    fn for_each_running(&self, f: &mut dyn FnMut(&str, Gpus)) {
        let mut ids: Vec<&str> = self.ids.by_slurm.values().map(String::as_str).collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(g) = (self.expected_gpus)(id).filter(|g| !g.is_zero()) {
                f(id, g);
            }
        }
    }
}

/// `<namespace>/<pod>` → bursar job id, learnt from `bursar kube watch`'s events.
#[derive(Debug, Clone, Default)]
pub struct KubePods {
    cluster: Option<String>,
    by_pod: HashMap<String, String>,
    pods_of: HashMap<String, Vec<String>>,
}

fn pod_list(e: &Event) -> Option<Vec<String>> {
    let (_, raw) = e.extra.iter().find(|(k, _)| k == "kube_pods")?;
    serde_json::from_str(raw.get()).ok()
}

impl KubePods {
    /// An empty index; with `cluster`, only events whose `kube_cluster` is it are learnt from (the
    /// agents' `--cluster`, when several clusters feed one serve).
    pub fn new(cluster: Option<String>) -> KubePods {
        KubePods { cluster: cluster.filter(|c| !c.is_empty()), ..KubePods::default() }
    }

    /// Learns from one event: a `job.started` naming its namespace and pods replaces the job's
    /// pods; the end of a run (`job.finished`, `job.requeued`) forgets them.
    pub fn observe(&mut self, e: &Event) {
        if let Some(c) = &self.cluster
            && text_field(e, "kube_cluster").as_deref() != Some(c.as_str())
        {
            return;
        }
        match &e.kind {
            EventKind::JobStarted { job_id, .. } => {
                let (Some(ns), Some(pods)) = (text_field(e, "kube_namespace"), pod_list(e)) else { return };
                self.forget(job_id);
                let keys: Vec<String> = pods.iter().map(|p| format!("{ns}/{p}")).collect();
                for k in &keys {
                    self.by_pod.insert(k.clone(), job_id.clone());
                }
                self.pods_of.insert(job_id.clone(), keys);
            }
            EventKind::JobFinished { job_id, .. } | EventKind::JobRequeued { job_id } => self.forget(job_id),
            _ => {}
        }
    }

    fn forget(&mut self, job: &str) {
        for k in self.pods_of.remove(job).unwrap_or_default() {
            if self.by_pod.get(&k).map(String::as_str) == Some(job) {
                self.by_pod.remove(&k);
            }
        }
    }

    /// bursar's id for the pod `<namespace>/<pod>`.
    pub fn bursar_id(&self, key: &str) -> Option<&str> {
        self.by_pod.get(key).map(String::as_str)
    }

    /// Every known pair, `(namespace/pod, bursar id)`.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_pod.iter().map(|(k, b)| (k.as_str(), b.as_str()))
    }

    /// Jobs with known pods.
    pub fn jobs(&self) -> impl Iterator<Item = &str> {
        self.pods_of.keys().map(String::as_str)
    }
}

/// Two pods of one 4-GPU job, for the aggregation's tests.
#[cfg(test)]
pub(crate) struct KubeTestJobs;

#[cfg(test)]
impl Jobs for KubeTestJobs {
    fn lookup(&self, key: &str) -> Option<Expected> {
        matches!(key, "nlp/train-0" | "nlp/train-1").then(|| Expected { job_id: "kube-1".into(), gpus: Gpus::whole(4) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::decode_event;

    fn ev(line: &str) -> Event {
        decode_event(line).unwrap()
    }

    #[test]
    fn slurm_ids_follow_the_watchers_events() {
        let mut ids = SlurmIds::new("lab");
        ids.observe(&ev(r#"{"id":"slurm-lab-17-started","time":"2026-12-01T09:00:00Z","type":"job.started","job_id":"lab-0a1b2c3d4e5f","slurm_job_id":"17","slurm_cluster":"lab"}"#));
        ids.observe(&ev(r#"{"id":"x","time":"2026-12-01T09:00:00Z","type":"job.started","job_id":"other","slurm_job_id":"18","slurm_cluster":"prod"}"#));
        ids.observe(&ev(r#"{"id":"y","time":"2026-12-01T09:00:00Z","type":"job.started","job_id":"j2"}"#));
        assert_eq!(ids.bursar_id("17"), Some("lab-0a1b2c3d4e5f"));
        assert_eq!(ids.bursar_id("18"), None, "another cluster's job");
        assert_eq!(ids.len(), 1);
        let jobs = ids.jobs(|id| (id == "lab-0a1b2c3d4e5f").then_some(Gpus::whole(2)));
        assert_eq!(jobs.lookup("17"), Some(Expected { job_id: "lab-0a1b2c3d4e5f".into(), gpus: Gpus::whole(2) }));
        assert_eq!(jobs.lookup("99"), None);
        let mut running = Vec::new();
        jobs.for_each_running(&mut |id, g| running.push((id.to_owned(), g)));
        assert_eq!(running, vec![("lab-0a1b2c3d4e5f".to_owned(), Gpus::whole(2))]);
        ids.observe(&ev(r#"{"id":"slurm-lab-17-finished","time":"2026-12-01T10:00:00Z","type":"job.finished","job_id":"lab-0a1b2c3d4e5f","status":"succeeded","slurm_job_id":"17","slurm_cluster":"lab"}"#));
        assert!(ids.is_empty());
    }

    #[test]
    fn kube_pods_follow_the_watchers_runs() {
        let mut pods = KubePods::new(Some("gpu-a".into()));
        pods.observe(&ev(r#"{"id":"kube-1-r1-started","time":"2026-12-01T09:00:00Z","type":"job.started","job_id":"gpu-a-0a1b","gpus":2,"kube_cluster":"gpu-a","kube_namespace":"nlp","kube_pods":["train-0-x","train-1-y"]}"#));
        pods.observe(&ev(r#"{"id":"other","time":"2026-12-01T09:00:00Z","type":"job.started","job_id":"b-1","kube_cluster":"gpu-b","kube_namespace":"nlp","kube_pods":["p"]}"#));
        assert_eq!(pods.bursar_id("nlp/train-1-y"), Some("gpu-a-0a1b"));
        assert_eq!(pods.bursar_id("nlp/p"), None, "another cluster's pod");
        // A new run replaces the pods of the last.
        pods.observe(&ev(r#"{"id":"kube-1-r2-started","time":"2026-12-01T10:00:00Z","type":"job.started","job_id":"gpu-a-0a1b","kube_cluster":"gpu-a","kube_namespace":"nlp","kube_pods":["train-0-z"]}"#));
        assert_eq!(pods.bursar_id("nlp/train-0-x"), None);
        assert_eq!(pods.bursar_id("nlp/train-0-z"), Some("gpu-a-0a1b"));
        pods.observe(&ev(r#"{"id":"kube-1-r2-requeued","time":"2026-12-01T10:30:00Z","type":"job.requeued","job_id":"gpu-a-0a1b","kube_cluster":"gpu-a"}"#));
        assert_eq!(pods.bursar_id("nlp/train-0-z"), None, "a requeued run's pods are forgotten");
        pods.observe(&ev(r#"{"id":"kube-1-r3-started","time":"2026-12-01T10:40:00Z","type":"job.started","job_id":"gpu-a-0a1b","kube_cluster":"gpu-a","kube_namespace":"nlp","kube_pods":["train-0-z"]}"#));
        pods.observe(&ev(r#"{"id":"f","time":"2026-12-01T11:00:00Z","type":"job.finished","job_id":"gpu-a-0a1b","status":"cancelled","kube_cluster":"gpu-a"}"#));
        assert_eq!(pods.pairs().count(), 0);
    }

    #[test]
    fn by_job_id_is_the_expected_gpus_lookup() {
        let jobs = ByJobId(|id: &str| (id == "j1").then_some(Gpus::whole(8)));
        assert_eq!(jobs.lookup("j1").map(|e| e.gpus), Some(Gpus::whole(8)));
        assert_eq!(jobs.lookup("j2"), None);
    }
}
