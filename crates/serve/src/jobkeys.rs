//! Which running job a utilisation sample's key names: the index the engine thread keeps beside
//! the engine (fed with every applied input, journal replay included) and the snapshot of running
//! jobs by key it hands the Prometheus source ([`crate::utilisation`]) at each evaluation time.
//!
//! Kept apart from the source's loop so the engine thread ([`crate::core`]) can own the index
//! without importing the loop that talks to it.

use std::collections::HashMap;

use bursar_engine::{Engine, JobPhase};
use bursar_model::Input;
use bursar_prometheus::{Expected, Jobs, KubePods, SlurmIds};
use serde::Deserialize;

/// How the source's job keys (`attribution.key`) name bursar's jobs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Keys {
    /// The key is Slurm's job id (what `integrations/slurm/prolog-dcgm.sh` writes): bursar's id is
    /// learnt from the `slurm_job_id` of the `job.started` events `bursar slurm watch` sends.
    #[default]
    Slurm,
    /// The key is bursar's job id.
    Bursar,
    /// The key is `<namespace>/<pod>`, dcgm-exporter's labels on Kubernetes: bursar's id is learnt
    /// from the `kube_namespace` and `kube_pods` of the `job.started` events `bursar kube watch`
    /// sends. The attribution defaults to the `namespace` and `pod` labels.
    Kubernetes,
}

/// `[jobs]` of the utilisation file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsConfig {
    /// `slurm` (default) or `bursar`.
    #[serde(default)]
    pub keys: Keys,
    /// With `keys = "slurm"`: the cluster name `bursar slurm watch --cluster` uses.
    #[serde(default)]
    pub slurm_cluster: Option<String>,
    /// With `keys = "kubernetes"`: only the events of this cluster (`bursar kube watch --cluster`);
    /// default every cluster's.
    #[serde(default)]
    pub kube_cluster: Option<String>,
}

/// The engine's view the source needs at one evaluation time: running jobs by key.
#[derive(Debug, Default, Clone)]
pub struct Running {
    by_key: HashMap<String, Expected>,
    /// Running jobs with GPUs that no key names (no Slurm id learnt for them), and why.
    pub unkeyed: Vec<(String, String)>,
}

impl Jobs for Running {
    fn lookup(&self, key: &str) -> Option<Expected> {
        self.by_key.get(key).cloned()
    }

    fn for_each_running(&self, f: &mut dyn FnMut(&str, bursar_model::Gpus)) {
        let mut all: Vec<&Expected> = self.by_key.values().collect();
        all.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        for e in all {
            f(&e.job_id, e.gpus);
        }
    }
}

/// What the engine thread keeps for the source: the Slurm id index, fed with every applied event.
#[derive(Debug)]
pub struct JobIndex {
    keys: Keys,
    slurm: SlurmIds,
    kube: KubePods,
}

impl JobIndex {
    /// An index for `cfg`.
    pub fn new(cfg: &JobsConfig) -> JobIndex {
        JobIndex {
            keys: cfg.keys.clone(),
            slurm: SlurmIds::new(cfg.slurm_cluster.clone().unwrap_or_default()),
            kube: KubePods::new(cfg.kube_cluster.clone()),
        }
    }

    /// Learns from one applied input (journal replay included).
    pub fn observe(&mut self, input: &Input) {
        match (&self.keys, input) {
            (Keys::Slurm, Input::Event(e)) => self.slurm.observe(e),
            (Keys::Kubernetes, Input::Event(e)) => self.kube.observe(e),
            _ => {}
        }
    }

    /// Learns the keys of every running job from its journaled inputs (after a restore from a
    /// snapshot, whose earlier inputs were not replayed): one index look-up per running job.
    pub fn rebuild(&mut self, log: &bursar_audit::AuditLog, engine: &Engine) -> Result<(), bursar_audit::AuditError> {
        if self.keys == Keys::Bursar {
            return Ok(());
        }
        let running: Vec<String> =
            engine.state().jobs().filter(|(_, j)| j.phase().is_live()).map(|(id, _)| id.to_owned()).collect();
        for id in running {
            for stored in log.events_of_job(&id)? {
                if let Ok(e) = bursar_model::decode_event(&stored.raw) {
                    self.observe(&Input::Event(e));
                }
            }
        }
        Ok(())
    }

    /// The running jobs by key, from the engine's state.
    pub fn running(&self, engine: &Engine) -> Running {
        let state = engine.state();
        let gpus = |id: &str| state.job(id).filter(|j| j.phase() == JobPhase::Running).map(|j| j.gpus());
        let mut by_key = HashMap::new();
        match self.keys {
            Keys::Bursar => {
                for (id, j) in state.jobs().filter(|(_, j)| j.phase() == JobPhase::Running) {
                    by_key.insert(id.to_owned(), Expected { job_id: id.to_owned(), gpus: j.gpus() });
                }
            }
            Keys::Slurm => {
                for (slurm_id, bursar_id) in self.slurm.pairs() {
                    if let Some(g) = gpus(bursar_id) {
                        by_key.insert(slurm_id.to_owned(), Expected { job_id: bursar_id.to_owned(), gpus: g });
                    }
                }
            }
            Keys::Kubernetes => {
                for (pod, bursar_id) in self.kube.pairs() {
                    if let Some(g) = gpus(bursar_id) {
                        by_key.insert(pod.to_owned(), Expected { job_id: bursar_id.to_owned(), gpus: g });
                    }
                }
            }
        }
        let mut unkeyed = Vec::new();
        if self.keys == Keys::Kubernetes {
            let keyed: std::collections::HashSet<&str> = by_key.values().map(|e| e.job_id.as_str()).collect();
            for (id, _) in state.jobs().filter(|(_, j)| j.phase() == JobPhase::Running && j.gpus() > 0) {
                if !keyed.contains(id) {
                    unkeyed.push((
                        id.to_owned(),
                        "no pod is known for it: its `job.started` named no `kube_pods` (is it sent by `bursar kube watch`?)".to_owned(),
                    ));
                }
            }
        }
        if self.keys == Keys::Slurm {
            let keyed: std::collections::HashSet<&str> = by_key.values().map(|e| e.job_id.as_str()).collect();
            for (id, _) in state.jobs().filter(|(_, j)| j.phase() == JobPhase::Running && j.gpus() > 0) {
                if !keyed.contains(id) {
                    unkeyed.push((
                        id.to_owned(),
                        format!(
                            "no Slurm job id is known for it: its `job.started` carried no `slurm_job_id` with `slurm_cluster = \"{}\"` (is it sent by `bursar slurm watch --cluster {}`?)",
                            self.slurm.cluster(),
                            self.slurm.cluster()
                        ),
                    ));
                }
            }
        }
        Running { by_key, unkeyed }
    }
}
