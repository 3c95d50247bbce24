//! `bursar kube watch`: job lifecycle events from the API server.
//!
//! It follows (kube-runtime's watchers, [`crate::watching`]) the units bursar admitted and the pods
//! that hold their GPUs:
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
//!
//! The units (and bursar's AdmissionChecks) are read from kube-runtime reflectors' stores, which a
//! relist replaces in one step. The pods are the watcher's own: it keeps what a store forgets —
//! a pod's last state when it was deleted, when it was seen gone, when it was first seen ended —
//! for up to an hour after it went.
//!
//! With Kueue it also reads, every `inventory_every` resyncs, the ClusterQueues, ResourceFlavors and
//! Nodes (three lists) and sends `pool.inventory` when the rows changed ([`crate::inventory`]).
//!
//! Style: async throughout (kube-runtime on tokio; every watcher's stream is polled by the one
//! loop that plans); serve is posted to through [`crate::serve`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::path::PathBuf;
use std::time::Duration as StdDuration;

use bursar_agent::server::Server;
use bursar_model::{Duration, FinishStatus, Input, Timestamp};
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::gpus::pod_gpus;
use crate::kinds::{self, Kind};
use crate::kueue::{AdmissionCheck, CheckState, Workload};
use crate::lifecycle::{self, End, PodView, Stop, UnitState, UnitView};
use crate::serve::Serve;
use crate::submit::{JOB_KEY, Mapping, job_id};
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
    /// With Kueue: read the ClusterQueues, ResourceFlavors and Nodes every this many resyncs (and
    /// at the first) and send `pool.inventory` when the rows changed ([`crate::inventory`]); 0:
    /// never.
    pub inventory_every: u32,
    /// The region the inventory names (default: the cluster name).
    pub region: String,
}

/// Kueue's ClusterQueues.
fn cluster_queues() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", "ClusterQueue"),
        "clusterqueues",
    )
}

/// Kueue's ResourceFlavors.
fn resource_flavors() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", "ResourceFlavor"),
        "resourceflavors",
    )
}

/// Reads the ClusterQueues, ResourceFlavors and Nodes (three lists) into inventory rows.
async fn read_inventory(client: &Client, cfg: &WatchConfig) -> Result<Vec<bursar_model::CapacityRow>> {
    let lp = kube::api::ListParams::default();
    let as_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
    let cqs = Api::<DynamicObject>::all_with(client.clone(), &cluster_queues())
        .list(&lp)
        .await
        .map_err(|e| Error::kube("list the ClusterQueues", e))?;
    let flavors = Api::<DynamicObject>::all_with(client.clone(), &resource_flavors())
        .list(&lp)
        .await
        .map_err(|e| Error::kube("list the ResourceFlavors", e))?;
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| Error::kube("list the nodes", e))?;
    let cqs: Vec<serde_json::Value> = cqs.items.iter().map(as_json).collect();
    let flavors: Vec<serde_json::Value> = flavors.items.iter().map(as_json).collect();
    let nodes: Vec<serde_json::Value> =
        nodes.items.iter().map(|n| serde_json::to_value(n).unwrap_or_default()).collect();
    Ok(crate::inventory::inventory(&cqs, &flavors, &nodes, &cfg.mapping, &cfg.region))
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
fn pod_entry(p: &Pod, mapping: &Mapping, seen_end: Option<Timestamp>) -> Option<PodEntry> {
    let spec = p.spec.as_ref()?;
    let gpus = pod_gpus(spec, mapping);
    if gpus.is_zero() {
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
    // Why it is not placed: the scheduler's `PodScheduled` condition, false (`Unschedulable`, with
    // its message; `SchedulingGated`).
    let unscheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
        .filter(|_| placed_at.is_none());
    let waits = unscheduled.map(|c| {
        let reason = c.reason.as_deref().unwrap_or("Pending");
        match c.message.as_deref().filter(|m| !m.is_empty()) {
            Some(m) => format!("{reason}: {m}"),
            None => reason.to_owned(),
        }
    });
    Some(PodEntry {
        view: PodView { name: p.name_any(), gpus, placed_at, ended_at, waits },
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
    // Why it waits, in Kueue: no quota reserved yet (the condition's reason and message: `Pending:
    // couldn't assign flavors to pod set main: insufficient unused quota …`), or reserved and some
    // admission check not ready yet.
    let waits = if !w.quota_reserved() {
        Some(match crate::kueue::condition(conds, "QuotaReserved") {
            Some(c) if c.message.is_empty() => c.reason.clone(),
            Some(c) => format!("{}: {}", c.reason, c.message),
            None => "Pending: no quota reserved yet".to_owned(),
        })
    } else if !crate::kueue::is_true(conds, "Admitted") {
        let pending: Vec<&str> = w
            .status
            .as_ref()
            .map(|s| {
                s.admission_checks.iter().filter(|c| c.state != CheckState::Ready).map(|c| c.name.as_str()).collect()
            })
            .unwrap_or_default();
        (!pending.is_empty()).then(|| format!("AdmissionChecks: waiting for {}", pending.join(", ")))
    } else {
        None
    };
    UnitView {
        waits,
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

/// What one of the watchers says.
enum Msg {
    /// The store so numbered holds a whole list now (the first, or a relist after `410 Gone`).
    Listed(usize),
    /// A pod's event.
    Pod(Box<watcher::Event<Pod>>),
    /// A store changed (planning reads it), a list is in progress (a store swaps when it is
    /// complete), or an error (logged; the watcher goes on).
    Other,
}

/// The stores the units are read from.
enum Units {
    /// Workloads, and the AdmissionChecks that say which are bursar's.
    Kueue { workloads: Store<Workload>, checks: Store<AdmissionCheck> },
    /// The admitted objects, per kind.
    Objects(Vec<(Kind, Store<DynamicObject>)>),
}

struct Watcher {
    cfg: WatchConfig,
    serve: Serve,
    state: WatchState,
    units: Units,
    pods: BTreeMap<String, PodEntry>,
    /// The uids of a pod list in progress.
    listing: Option<BTreeSet<String>>,
    /// Stores that hold a list.
    synced: BTreeSet<usize>,
    /// Stores there are.
    stores: usize,
    /// Pods listed once.
    pods_synced: bool,
}

impl Watcher {
    fn on(&mut self, msg: Msg) {
        match msg {
            Msg::Listed(source) => {
                self.synced.insert(source);
            }
            Msg::Other => {}
            Msg::Pod(e) => self.on_pod(*e),
        }
    }

    fn on_pod(&mut self, event: watcher::Event<Pod>) {
        let now = Timestamp::wall_clock();
        match event {
            watcher::Event::Init => self.listing = Some(BTreeSet::new()),
            watcher::Event::InitApply(p) => {
                if let (Some(listing), Some(uid)) = (self.listing.as_mut(), p.uid()) {
                    listing.insert(uid);
                }
                self.apply_pod(&p);
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                // Pods gone while the watch was broken: they stopped holding GPUs.
                for (uid, e) in self.pods.iter_mut() {
                    if !listed.contains(uid) && e.gone.is_none() {
                        e.gone = Some(now.millis());
                    }
                }
                self.pods_synced = true;
            }
            watcher::Event::Apply(p) => self.apply_pod(&p),
            watcher::Event::Delete(p) => {
                self.apply_pod(&p);
                if let Some(e) = p.uid().and_then(|u| self.pods.get_mut(&u)) {
                    e.gone.get_or_insert(now.millis());
                }
            }
        }
    }

    fn apply_pod(&mut self, p: &Pod) {
        let Some(uid) = p.uid() else { return };
        let seen_end = self.pods.get(&uid).and_then(|e| e.view.ended_at);
        match pod_entry(p, &self.cfg.mapping, seen_end) {
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
        match &self.units {
            Units::Kueue { workloads, checks } => {
                let ours: BTreeSet<String> = checks
                    .state()
                    .iter()
                    .filter(|a| a.spec.controller_name == CONTROLLER_NAME)
                    .map(|a| a.name_any())
                    .collect();
                for w in workloads.state() {
                    let uid = w.uid().unwrap_or_default();
                    let has_ours =
                        w.status.as_ref().is_some_and(|s| s.admission_checks.iter().any(|c| ours.contains(&c.name)));
                    if !has_ours && !self.state.units.contains_key(&uid) {
                        continue;
                    }
                    let owners = workload_owners(&w);
                    let pods = self.pod_views(|e| e.owners.iter().any(|o| owners.contains(o)));
                    out.insert(uid, (workload_view(&w, &ours, &self.cfg.mapping), pods));
                }
            }
            Units::Objects(kinds) => {
                for (kind, store) in kinds {
                    for o in store.state() {
                        let Some(job) = o.labels().get(JOB_KEY).cloned() else { continue };
                        let uid = o.uid().unwrap_or_default();
                        let value = serde_json::to_value(&*o).unwrap_or_default();
                        let view = kinds::unit_view(kind, &value, &job, &self.cfg.mapping);
                        let pods =
                            self.pod_views(|e| e.job.as_deref() == Some(job.as_str()) || e.owners.contains(&uid));
                        out.insert(uid, (view, pods));
                    }
                }
            }
        }
        out
    }

    /// Reads the inventory and sends it when it differs from `last` (the rows last sent); a failed
    /// read or post is logged and retried at the next read: the jobs matter more.
    async fn send_inventory(&self, client: &Client, last: &mut Option<Vec<bursar_model::CapacityRow>>) {
        let rows = match read_inventory(client, &self.cfg).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ClusterQueues and nodes for the inventory");
                return;
            }
        };
        if rows.is_empty() || last.as_ref() == Some(&rows) {
            return;
        }
        let now = Timestamp::wall_clock();
        let inv = bursar_model::Inventory {
            id: format!("kube-{}-inventory-{}", self.cfg.mapping.cluster, now.millis()),
            time: now,
            source: Some(format!("kube:{}", self.cfg.mapping.cluster)),
            capacity: rows.clone(),
        };
        match self.serve.post(vec![Input::Inventory(inv)]).await {
            Ok(_) => {
                tracing::info!(rows = rows.len(), "sent the inventory");
                *last = Some(rows);
            }
            Err(e) => tracing::warn!(error = %e, "could not send the inventory; retrying at the next read"),
        }
    }

    /// Plans, posts and saves; a failed post leaves the state as it was (retried later).
    async fn sync(&mut self) -> Result<()> {
        if self.synced.len() < self.stores || !self.pods_synced {
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
        let sent = inputs.len();
        let posted = self.serve.post(inputs).await?;
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

/// A reflector's stream of kind `kind` (store `source`, fed by `writer`), as the watcher's messages.
fn stored<K>(
    api: Api<K>,
    wc: watcher::Config,
    writer: Writer<K>,
    kind: String,
    source: usize,
) -> BoxStream<'static, Msg>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    watcher(api, wc)
        .default_backoff()
        .reflect(writer)
        .map(move |item| match item {
            Ok(watcher::Event::InitDone) => Msg::Listed(source),
            Ok(_) => Msg::Other,
            Err(e) => {
                crate::watching::log_error(&kind, &e);
                Msg::Other
            }
        })
        .boxed()
}

/// Runs the watcher until the process ends; returns on a state-file error (a retry would not fix
/// it).
pub async fn run(client: Client, cfg: WatchConfig) -> Result<()> {
    let state: WatchState = bursar_agent::state::load(&cfg.state)?;
    tracing::info!(state = %cfg.state.display(), known = state.units.len(), "kube watch starting");
    let wc = |labels: Option<&str>| crate::watching::config(cfg.watch_timeout, labels);
    let mut streams = Vec::new();
    let (units, pod_labels) = match &cfg.mode {
        Mode::Kueue => {
            let (workloads, w) = reflector::store();
            let (checks, c) = reflector::store();
            streams.push(stored(Api::<Workload>::all(client.clone()), wc(None), w, "workloads".into(), 0));
            streams.push(stored(Api::<AdmissionCheck>::all(client.clone()), wc(None), c, "admissionchecks".into(), 1));
            (Units::Kueue { workloads, checks }, cfg.pod_selector.clone())
        }
        Mode::Objects(kinds) => {
            let mut stores = Vec::new();
            for (i, kind) in kinds.iter().enumerate() {
                let resource = kind.api_resource();
                let writer = Writer::new(resource.clone());
                stores.push((kind.clone(), writer.as_reader()));
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                streams.push(stored(api, wc(Some(JOB_KEY)), writer, kind.plural.clone(), i));
            }
            (Units::Objects(stores), Some(JOB_KEY.to_owned()))
        }
    };
    let stores = streams.len();
    let client_for_inventory = client.clone();
    let pods = watcher(Api::<Pod>::all(client), wc(pod_labels.as_deref())).default_backoff().map(|item| match item {
        Ok(e) => Msg::Pod(Box::new(e)),
        Err(e) => {
            crate::watching::log_error("pods", &e);
            Msg::Other
        }
    });
    streams.push(pods.boxed());
    let mut events = futures_util::stream::select_all(streams);
    let mut w = Watcher {
        serve: Serve::new(cfg.server.clone()),
        cfg: cfg.clone(),
        state,
        units,
        pods: BTreeMap::new(),
        listing: None,
        synced: BTreeSet::new(),
        stores,
        pods_synced: false,
    };
    let mut tick = tokio::time::interval(cfg.resync);
    let inventory_client = (cfg.mode == Mode::Kueue && cfg.inventory_every > 0).then(|| client_for_inventory.clone());
    let mut ticks: u32 = 0;
    let mut last_rows: Option<Vec<bursar_model::CapacityRow>> = None;
    loop {
        tokio::select! {
            msg = events.next() => {
                let Some(m) = msg else { return Err(Error::Stopped("the watches")) };
                w.on(m);
                // Take every change already queued before planning once.
                while let Some(Some(m)) = events.next().now_or_never() {
                    w.on(m);
                }
            }
            _ = tick.tick() => {
                if let Some(c) = &inventory_client {
                    if ticks.is_multiple_of(cfg.inventory_every) {
                        w.send_inventory(c, &mut last_rows).await;
                    }
                    ticks = ticks.wrapping_add(1);
                }
            }
        }
        match w.sync().await {
            Ok(()) => {}
            Err(e @ Error::Agent(bursar_agent::Error::State { .. })) => return Err(e),
            Err(e) => tracing::warn!(error = %e, "could not send job events; retrying"),
        }
    }
}
