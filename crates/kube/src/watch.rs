//! `bursar kube watch`: job lifecycle events from the API server.
//!
//! It follows (list + watch, [`crate::reflect`]) the units bursar admitted and the pods that hold
//! their GPUs:
//!
//! - **Kueue** (`--kueue`, the default): the Workloads that carry one of bursar's admission checks
//!   (the AdmissionChecks whose controller is [`crate::CONTROLLER_NAME`], followed too) and every
//!   Pod (or those `--pod-selector` picks); a pod belongs to a Workload when its controller, itself,
//!   or the JobSet its `jobset.sigs.k8s.io/jobset-uid` label names is the Workload's owner.
//! - **objects** (`--kind batch/v1/Job …`, beside `bursar kube webhook`): the objects of those kinds
//!   labelled `bursar.dev/job` by the webhook, and the pods carrying the same label (the webhook puts
//!   it on every pod template).
//!
//! After every change it asks [`crate::lifecycle::plan`] what to send, posts the events to serve in
//! one batch, and only after serve accepted them rewrites its state file: a crash in between resends
//! the same events under the same ids, which serve drops. After a restart (or a `410 Gone`) the
//! lists give the whole current set, so a unit or pod deleted meanwhile is seen as missing: a unit
//! that was running is finished (`cancelled`, `kube_reason: "Deleted"`), a pod's run is ended at
//! the unit's own transition time. Nothing is lost, nothing is sent twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use bursar_agent::server::Server;
use bursar_model::{Duration, FinishStatus, Input, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::kinds::{self, Kind};
use crate::kueue::{AdmissionCheck, CheckState, Workload};
use crate::lifecycle::{self, End, PodView, Stop, UnitState, UnitView};
use crate::reflect::{self, Counters, Feed, Settings};
use crate::submit::{JOB_KEY, Mapping, job_id, pod_gpus};
use crate::{CONTROLLER_NAME, Error, Result};

/// What the watcher follows.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Kueue Workloads with bursar's admission check.
    Kueue,
    /// Objects of these kinds admitted by `bursar kube webhook` (label `bursar.dev/job`).
    Objects(Vec<Kind>),
}

/// Settings of `bursar kube watch`.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// serve (a `producer`).
    pub server: Server,
    /// The cluster name and GPU resource.
    pub mapping: Mapping,
    /// What to follow.
    pub mode: Mode,
    /// The state file.
    pub state: PathBuf,
    /// How long a run waits for all its pods before it is started with the GPUs held.
    pub settle: Duration,
    /// How often the state is looked at without a change (settle timers, failed posts).
    pub resync: StdDuration,
    /// A label selector for the pods followed in Kueue mode.
    pub pod_selector: Option<String>,
    /// Server-side timeout of each watch, seconds.
    pub watch_timeout: u32,
}

/// The watcher's state file: per unit uid, what was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchState {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// Unit uid → its state.
    #[serde(default)]
    pub units: BTreeMap<String, UnitState>,
}

/// A pod as the watcher keeps it.
#[derive(Debug, Clone)]
struct PodEntry {
    view: PodView,
    /// Uids it belongs to: its controller's, its own, its JobSet's.
    owners: Vec<String>,
    /// Its `bursar.dev/job` label.
    job: Option<String>,
    /// When the watcher saw it gone (deleted, or missing from a relist), ms.
    gone: Option<i64>,
}

fn ts(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Timestamp {
    Timestamp(t.0.as_millisecond())
}

/// The watcher's view of a pod, `None` when it asks for no GPUs. `seen_end`: when the watcher
/// first saw it terminated, for a pod whose containers report no end.
fn pod_entry(p: &Pod, resource: &str, seen_end: Option<Timestamp>) -> Option<PodEntry> {
    let spec = p.spec.as_ref()?;
    let gpus = pod_gpus(spec, resource);
    if gpus == 0 {
        return None;
    }
    let status = p.status.as_ref();
    let placed_at = spec.node_name.as_ref().map(|_| {
        let scheduled = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(ts);
        scheduled
            .or_else(|| status.and_then(|s| s.start_time.as_ref()).map(ts))
            .or_else(|| p.metadata.creation_timestamp.as_ref().map(ts))
            .unwrap_or_else(Timestamp::wall_clock)
    });
    let terminal = matches!(status.and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    let ended_at = terminal.then(|| {
        status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref().map(ts))
            .max()
            .or(seen_end)
            .unwrap_or_else(Timestamp::wall_clock)
    });
    let mut owners: Vec<String> = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
        .collect();
    owners.extend(p.metadata.uid.clone());
    let labels = p.metadata.labels.as_ref();
    owners.extend(labels.and_then(|l| l.get("jobset.sigs.k8s.io/jobset-uid")).cloned());
    Some(PodEntry {
        view: PodView { name: p.name_any(), gpus, placed_at, ended_at },
        owners,
        job: labels.and_then(|l| l.get(JOB_KEY)).cloned(),
        gone: None,
    })
}

/// The lifecycle view of a Workload carrying check(s) `ours`.
fn workload_view(w: &Workload, ours: &BTreeSet<String>, mapping: &Mapping) -> UnitView {
    let conds = w.conditions();
    let cond_time = |kind: &str| {
        crate::kueue::condition(conds, kind).filter(|c| c.status == "True").map(|c| ts(&c.last_transition_time))
    };
    let end = crate::kueue::condition(conds, "Finished").filter(|c| c.status == "True").map(|c| End {
        at: ts(&c.last_transition_time),
        status: if c.reason == "Succeeded" { FinishStatus::Succeeded } else { FinishStatus::Failed },
        reason: c.reason.clone(),
    });
    let evicted = crate::kueue::condition(conds, "Evicted").filter(|c| c.status == "True");
    let stopped = if !w.is_active() {
        Some(Stop {
            at: cond_time("Evicted"),
            for_good: true,
            reason: evicted.map_or_else(|| "InactiveWorkload".to_owned(), |c| c.reason.clone()),
        })
    } else {
        evicted.map(|c| Stop { at: Some(ts(&c.last_transition_time)), for_good: false, reason: c.reason.clone() })
    };
    let submission = crate::submit::Submission::of_workload(w, mapping, None);
    let admitted = w
        .status
        .as_ref()
        .is_some_and(|s| s.admission_checks.iter().any(|c| ours.contains(&c.name) && c.state == CheckState::Ready))
        || crate::kueue::is_true(conds, "Admitted");
    UnitView {
        job_id: job_id(&mapping.cluster, &w.uid().unwrap_or_default()),
        namespace: w.namespace().unwrap_or_default(),
        kind: "Workload".into(),
        name: w.name_any(),
        expected_pods: submission.gpu_pods().map(|p| p.count).fold(0, u32::saturating_add),
        admitted,
        end,
        stopped,
    }
}

/// Owner uids of a Workload's pods.
fn workload_owners(w: &Workload) -> Vec<String> {
    let mut out: Vec<String> = w.metadata.owner_references.iter().flatten().map(|o| o.uid.clone()).collect();
    out.extend(w.labels().get("kueue.x-k8s.io/job-uid").cloned());
    out
}

enum Msg {
    Workloads(Box<Feed<Workload>>),
    Checks(Box<Feed<AdmissionCheck>>),
    Objects(usize, Box<Feed<DynamicObject>>),
    Pods(Box<Feed<Pod>>),
}

struct Watcher {
    cfg: WatchConfig,
    state: WatchState,
    workloads: BTreeMap<String, Workload>,
    ours: BTreeSet<String>,
    objects: BTreeMap<String, (usize, DynamicObject)>,
    pods: BTreeMap<String, PodEntry>,
    /// Reflectors that have delivered their first list.
    synced: BTreeSet<&'static str>,
    expected: usize,
}

impl Watcher {
    fn on(&mut self, msg: Msg) {
        let now = Timestamp::wall_clock();
        match msg {
            Msg::Workloads(f) => {
                self.synced.insert("workloads");
                match *f {
                    Feed::Listed(all) => {
                        self.workloads = all.into_iter().map(|w| (w.uid().unwrap_or_default(), w)).collect()
                    }
                    Feed::Applied(w) => {
                        self.workloads.insert(w.uid().unwrap_or_default(), w);
                    }
                    Feed::Deleted(w) => {
                        self.workloads.remove(&w.uid().unwrap_or_default());
                    }
                }
            }
            Msg::Checks(f) => {
                self.synced.insert("checks");
                match *f {
                    Feed::Listed(all) => {
                        self.ours = all
                            .iter()
                            .filter(|a| a.spec.controller_name == CONTROLLER_NAME)
                            .map(|a| a.name_any())
                            .collect();
                    }
                    Feed::Applied(a) if a.spec.controller_name == CONTROLLER_NAME => {
                        self.ours.insert(a.name_any());
                    }
                    Feed::Applied(a) | Feed::Deleted(a) => {
                        self.ours.remove(&a.name_any());
                    }
                }
            }
            Msg::Objects(i, f) => {
                self.synced.insert(match i {
                    0 => "objects-0",
                    1 => "objects-1",
                    2 => "objects-2",
                    3 => "objects-3",
                    _ => "objects-n",
                });
                match *f {
                    Feed::Listed(all) => {
                        self.objects.retain(|_, (k, _)| *k != i);
                        for o in all {
                            self.objects.insert(o.uid().unwrap_or_default(), (i, o));
                        }
                    }
                    Feed::Applied(o) => {
                        self.objects.insert(o.uid().unwrap_or_default(), (i, o));
                    }
                    Feed::Deleted(o) => {
                        self.objects.remove(&o.uid().unwrap_or_default());
                    }
                }
            }
            Msg::Pods(f) => {
                self.synced.insert("pods");
                let resource = self.cfg.mapping.gpu_resource.clone();
                match *f {
                    Feed::Listed(all) => {
                        let listed: BTreeSet<String> = all.iter().filter_map(|p| p.uid()).collect();
                        // Pods gone while the watch was broken: they stopped holding GPUs.
                        for (uid, e) in self.pods.iter_mut() {
                            if !listed.contains(uid) && e.gone.is_none() {
                                e.gone = Some(now.millis());
                            }
                        }
                        for p in all {
                            self.apply_pod(&p, &resource);
                        }
                    }
                    Feed::Applied(p) => self.apply_pod(&p, &resource),
                    Feed::Deleted(p) => {
                        self.apply_pod(&p, &resource);
                        if let Some(e) = p.uid().and_then(|u| self.pods.get_mut(&u)) {
                            e.gone.get_or_insert(now.millis());
                        }
                    }
                }
            }
        }
    }

    fn apply_pod(&mut self, p: &Pod, resource: &str) {
        let Some(uid) = p.uid() else { return };
        let seen_end = self.pods.get(&uid).and_then(|e| e.view.ended_at);
        match pod_entry(p, resource, seen_end) {
            Some(mut e) => {
                e.gone = self.pods.get(&uid).and_then(|old| old.gone);
                self.pods.insert(uid, e);
            }
            None => {
                self.pods.remove(&uid);
            }
        }
    }

    fn pod_views(&self, matches: impl Fn(&PodEntry) -> bool) -> Vec<PodView> {
        self.pods
            .values()
            .filter(|e| matches(e))
            .map(|e| {
                let mut v = e.view.clone();
                if v.ended_at.is_none() && v.placed_at.is_some() {
                    // Gone without being seen to end: it stopped holding GPUs when it went, or (a
                    // pod missing from a list after a restart) at its unit's own transition time.
                    v.ended_at = e.gone.map(Timestamp);
                }
                v
            })
            .collect()
    }

    fn units(&self) -> BTreeMap<String, (UnitView, Vec<PodView>)> {
        let mut out = BTreeMap::new();
        match &self.cfg.mode {
            Mode::Kueue => {
                for (uid, w) in &self.workloads {
                    let has_ours = w
                        .status
                        .as_ref()
                        .is_some_and(|s| s.admission_checks.iter().any(|c| self.ours.contains(&c.name)));
                    if !has_ours && !self.state.units.contains_key(uid) {
                        continue;
                    }
                    let owners = workload_owners(w);
                    let pods = self.pod_views(|e| e.owners.iter().any(|o| owners.contains(o)));
                    out.insert(uid.clone(), (workload_view(w, &self.ours, &self.cfg.mapping), pods));
                }
            }
            Mode::Objects(kinds) => {
                for (uid, (i, o)) in &self.objects {
                    let Some(kind) = kinds.get(*i) else { continue };
                    let Some(job) = o.labels().get(JOB_KEY).cloned() else { continue };
                    let value = serde_json::to_value(o).unwrap_or_default();
                    let view = kinds::unit_view(kind, &value, &job, &self.cfg.mapping.gpu_resource);
                    let pods = self.pod_views(|e| e.job.as_deref() == Some(job.as_str()) || e.owners.contains(uid));
                    out.insert(uid.clone(), (view, pods));
                }
            }
        }
        out
    }

    /// Plans, posts and saves; a failed post leaves the state as it was (retried later).
    async fn sync(&mut self) -> Result<()> {
        if self.synced.len() < self.expected {
            return Ok(());
        }
        let now = Timestamp::wall_clock();
        let units = self.units();
        let (steps, forget) = lifecycle::plan(&self.state.units, &units, now, self.cfg.settle);
        if steps.is_empty() && forget.is_empty() {
            return Ok(());
        }
        let inputs: Vec<Input> =
            steps.iter().map(|s| Input::Event(crate::events::of_step(&self.cfg.mapping.cluster, s))).collect();
        let server = self.cfg.server.clone();
        let sent = inputs.len();
        let posted = tokio::task::spawn_blocking(move || server.post(&inputs))
            .await
            .map_err(|e| Error::Settings(format!("the post to serve did not finish: {e}")))??;
        for s in &steps {
            tracing::info!(job = %s.job_id, id = %s.id, event = ?s.event, "lifecycle");
        }
        if sent > 0 {
            tracing::info!(sent, duplicates = posted.duplicates, "sent job events");
        }
        for s in steps {
            self.state.units.insert(s.uid, s.state);
        }
        for uid in forget {
            self.state.units.remove(&uid);
        }
        // Tombstones of pods no unit needs any more.
        let horizon = now.millis() - 3_600_000;
        self.pods.retain(|_, e| e.gone.is_none_or(|g| g > horizon));
        self.state.version = 1;
        bursar_agent::state::save(&self.cfg.state, &self.state)?;
        Ok(())
    }
}

/// Counters of the watcher's reflectors, for tests: index 0 is the units' (Workloads or the
/// first kind), the last the pods'.
pub type WatchCounters = Vec<Arc<Counters>>;

/// Runs the watcher until the process ends; returns on a state-file error (a retry would not fix
/// it).
pub async fn run(client: Client, cfg: WatchConfig, counters: WatchCounters) -> Result<()> {
    let state: WatchState = bursar_agent::state::load(&cfg.state)?;
    tracing::info!(state = %cfg.state.display(), known = state.units.len(), "kube watch starting");
    let (tx, mut rx) = mpsc::channel::<Msg>(1024);
    let counter = |i: usize| counters.get(i).cloned().unwrap_or_default();
    let settings = |name: &str, labels: Option<String>| Settings {
        name: name.into(),
        labels,
        watch_timeout: cfg.watch_timeout,
        ..Settings::default()
    };
    let mut expected = 1;
    match &cfg.mode {
        Mode::Kueue => {
            expected += 2;
            tokio::spawn(reflect::run(
                Api::<Workload>::all(client.clone()),
                settings("workloads", None),
                tx.clone(),
                |f| Msg::Workloads(Box::new(f)),
                counter(0),
            ));
            tokio::spawn(reflect::run(
                Api::<AdmissionCheck>::all(client.clone()),
                settings("admissionchecks", None),
                tx.clone(),
                |f| Msg::Checks(Box::new(f)),
                counter(1),
            ));
            tokio::spawn(reflect::run(
                Api::<Pod>::all(client.clone()),
                settings("pods", cfg.pod_selector.clone()),
                tx.clone(),
                |f| Msg::Pods(Box::new(f)),
                counter(2),
            ));
        }
        Mode::Objects(kinds) => {
            if kinds.len() > 4 {
                return Err(Error::Settings("at most 4 kinds (--kind) per watcher".into()));
            }
            for (i, kind) in kinds.iter().enumerate() {
                expected += 1;
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
                tokio::spawn(reflect::run(
                    api,
                    settings(&kind.plural, Some(JOB_KEY.into())),
                    tx.clone(),
                    move |f| Msg::Objects(i, Box::new(f)),
                    counter(i),
                ));
            }
            tokio::spawn(reflect::run(
                Api::<Pod>::all(client.clone()),
                settings("pods", Some(JOB_KEY.into())),
                tx.clone(),
                |f| Msg::Pods(Box::new(f)),
                counter(kinds.len()),
            ));
        }
    }
    drop(tx);
    let mut w = Watcher {
        cfg: cfg.clone(),
        state,
        workloads: BTreeMap::new(),
        ours: BTreeSet::new(),
        objects: BTreeMap::new(),
        pods: BTreeMap::new(),
        synced: BTreeSet::new(),
        expected,
    };
    let mut tick = tokio::time::interval(cfg.resync);
    loop {
        tokio::select! {
            msg = rx.recv() => {
                let Some(m) = msg else { return Err(Error::Settings("the watches ended".into())) };
                w.on(m);
                // Take every change already queued before planning once.
                while let Ok(m) = rx.try_recv() {
                    w.on(m);
                }
            }
            _ = tick.tick() => {}
        }
        match w.sync().await {
            Ok(()) => {}
            Err(e @ Error::Agent(bursar_agent::Error::State { .. })) => return Err(e),
            Err(e) => tracing::warn!(error = %e, "could not send job events; retrying"),
        }
    }
}
