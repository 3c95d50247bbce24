//! `bursar slurm watch`: what Slurm queued, allocated and ran, run by run, reported to serve.
//!
//! Each poll reads the queue cheaply ([`Slurm::queue`](crate::slurm::Slurm::queue): `squeue -O`, a
//! few fields a job), reads a job's record ([`Slurm::details`](crate::slurm::Slurm::details)) only
//! when it is new (its AdminComment: bursar's id), when a run starts (the GPUs Slurm allocated, and
//! who released it if it was held for approval) and when its partition changed (a re-admission),
//! then compares with what it already sent (its state file) and sends the difference in one batch.
//! Only after serve accepted the batch is the state file rewritten; a crash in between resends the
//! same events under the same ids, which serve drops.
//!
//! Per job (and per array task), Slurm's states map onto bursar's events:
//!
//! | Slurm | sent |
//! |---|---|
//! | first seen (pending, running or ended) | `job.queued` (confirms the admission; an array once, for its parent) |
//! | RUNNING (a new run: first, or RestartCnt went up) | `job.started` with `gpus` (and `parent` for a task, `released_by` after an outside release) |
//! | PENDING/REQUEUED/REQUEUE_HOLD/SPECIAL_EXIT after running (requeue, preemption, node failure, requeuehold) | `job.requeued` |
//! | a final state (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, …) | `job.finished` at Slurm's EndTime |
//! | a finished job pending or running again (its owner's `scontrol requeue`) | `job.requeued` (a rerun), then `job.started` |
//! | the last task of an array ended (no task pending or running) | `job.finished` of the array's parent |
//! | partition changed, the hook re-admitted it | `job.finished` of the old id (`replaced_by`), `job.queued` of the new |
//! | pending, its `Reason` changed (`Resources`, `Priority`, `QOSMaxGRESPerUser`, …) | `reason` on that poll's `job.queued`, else another `job.queued` with it |
//!
//! Times: a pending job's StartTime and EndTime are Slurm's *expectations* and are never sent; a
//! start is the run's StartTime, an end the final EndTime, a requeue the poll that saw it (or the next
//! run's StartTime if it already runs again); every time is clamped to the watcher's clock, so no
//! event is ever in the future.
//!
//! A job the watcher saw and that vanished from the queue (the watcher was down for longer than
//! `MinJobAge`) is finished as `cancelled` with `slurm_state: "unknown"`: its GPUs are released in
//! bursar's books, and the audit log says the end was not observed.
//!
//! An admission Slurm never created — a job it refused after the hook (`-p nosuch`), the admitted
//! component of a heterogeneous job whose other component was denied, a `--test-only` submission
//! from a client without `cli_filter.lua` — is released within two polls while the watcher runs:
//! each poll asks serve which admissions of this cluster are still unconfirmed (`GET
//! /v1/unconfirmed`), and one admitted before the previous poll began, that neither poll found in
//! Slurm's queue, is finished as `cancelled` with `slurm_state: "never created"` and the reason
//! (issue 55: these held GPUs for `confirm_within_s`, 15 minutes by default). `confirm_within_s`
//! stays the bound while the watcher is down.
//!
//! Every `nodes_every` polls (10 by default, and at the first) it also reads the nodes (`scontrol -d
//! show node -o`, one call) and sends `pool.inventory` — GPUs in service, allocated, free and drained
//! per GPU type and partition ([`crate::nodes`]) — when the rows changed since it last sent them. From
//! the same read it writes the GPUs of each partition's largest node to `--node-gpus-file`
//! ([`crate::node_gpus`]), which `job_submit.lua` reads to reserve what an `--exclusive` job holds.
//!
//! Why polling rather than `jobcomp/lua`: a jobcomp hook runs inside slurmctld (serialised with every
//! other RPC, like `job_submit.lua`), sees only ends, and must never block; a poller sees every state,
//! cannot stall the scheduler when bursar is slow or down, and catches up after its own restart from
//! slurmctld's memory of ended jobs. See docs/integrations/slurm.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bursar_agent::server::Server;
use bursar_model::Input;

use crate::detail::Details;
use crate::events::{Report, What};
use crate::queue::{EndStatus, Key, Phase, Row};
use crate::slurm::{Ask, Slurm};
use crate::state::{self, Kind, Last, Memo, WatchState};
use crate::{Error, Result};

/// What one poll decided: the reports to send, and the state once serve has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Events to send, in order.
    pub reports: Vec<Report>,
    /// Memos to write (new or changed).
    pub updates: BTreeMap<String, Memo>,
    /// Keys to forget (no longer listed, nothing left to send).
    pub forget: Vec<String>,
    /// Things a person should know (a forged `--test-only` marker, a job let through unadmitted).
    pub warnings: Vec<String>,
}

impl Plan {
    /// Applies the plan to `state` (once serve accepted its reports).
    pub fn apply(self, state: &mut WatchState) {
        for (k, m) in self.updates {
            state.jobs.insert(k, m);
        }
        for k in self.forget {
            state.jobs.remove(&k);
        }
        state.version = state::VERSION;
    }

    fn changed(&self) -> bool {
        !self.updates.is_empty() || !self.forget.is_empty()
    }
}

/// Whether a row holds or held an allocation in its current run.
fn live(r: &Row) -> bool {
    matches!(r.phase(), Phase::Running) || (matches!(r.phase(), Phase::Ended(_)) && r.ran())
}

/// Whether a row is a requeued run winding down: right after `scontrol requeue` (or a preemption or
/// node failure) Slurm shows the job COMPLETING with RestartCnt already raised, before PENDING. That is
/// the end of run `m.restarts`, not the start of the next.
fn winding_down(m_restarts: u32, r: &Row) -> bool {
    r.state.starts_with("COMPLETING") && r.restarts > m_restarts
}

/// Whether a row begins a run the memo has not reported yet.
fn run_begins(m: &Memo, r: &Row) -> bool {
    if winding_down(m.restarts, r) {
        return false;
    }
    let live = live(r);
    match m.last {
        Last::Queued | Last::Requeued => live,
        Last::Running => live && r.restarts > m.restarts,
        Last::Finished => live && (r.restarts > m.restarts || matches!(r.phase(), Phase::Running)),
    }
}

/// The records to read this poll: jobs and arrays first seen, runs starting (for their GPUs and who
/// released them), jobs whose partition changed. Pure.
pub fn asks(state: &WatchState, rows: &[Row]) -> Vec<Ask> {
    let mut ids = BTreeSet::new();
    let mut arrays_new = BTreeSet::new();
    for r in rows {
        let key = r.key();
        match key {
            Key::Job(_) => match state.get(&key) {
                None => {
                    ids.insert(r.job_id);
                }
                Some(m) if m.kind == Kind::Job => {
                    let needs_gpus = r.tres_gpus().is_none() || m.held;
                    if (run_begins(m, r) && needs_gpus) || (!r.partition.is_empty() && r.partition != m.partition) {
                        ids.insert(r.job_id);
                    }
                }
                Some(_) => {}
            },
            Key::Task(a, _) | Key::Array(a) => {
                let parent = state.get(&Key::Array(a));
                if parent.is_none() {
                    arrays_new.insert(a);
                }
                let run_starts = match state.get(&key) {
                    None => live(r) && !winding_down(0, r),
                    Some(m) => run_begins(m, r),
                };
                if matches!(key, Key::Task(..))
                    && parent.is_none_or(|p| p.kind == Kind::Array)
                    && run_starts
                    && r.tres_gpus().is_none()
                {
                    ids.insert(r.job_id);
                }
            }
        }
    }
    // A new array: one record tells its admission (every task carries the array's AdminComment);
    // prefer a task's own JobID (one record) to the array's (all of its records).
    for a in arrays_new {
        let of_array: Vec<&Row> = rows.iter().filter(|r| r.array_job_id == Some(a)).collect();
        if !of_array.iter().any(|r| ids.contains(&r.job_id)) {
            let pick = of_array.iter().find(|r| r.job_id != a).or(of_array.first());
            if let Some(r) = pick {
                ids.insert(r.job_id);
            }
        }
    }
    ids.into_iter().map(|id| Ask::for_row(rows, id)).collect()
}

/// A plan in the making: the memos as they will be, and what to send.
struct Planner<'a> {
    state: &'a WatchState,
    details: &'a BTreeMap<u64, Details>,
    now: i64,
    plan: Plan,
}

impl Planner<'_> {
    fn memo(&self, key: &Key) -> Option<Memo> {
        let k = key.to_string();
        self.plan.updates.get(&k).cloned().or_else(|| self.state.jobs.get(&k).cloned())
    }

    fn put(&mut self, key: &Key, m: Memo) {
        let k = key.to_string();
        if self.state.jobs.get(&k) != Some(&m) {
            self.plan.updates.insert(k, m);
        } else {
            self.plan.updates.remove(&k);
        }
    }

    fn clamp(&self, t: i64) -> i64 {
        t.min(self.now)
    }

    fn report(&mut self, key: Key, m: &Memo, run: u32, at: i64, what: What) {
        let at = self.clamp(at);
        self.plan.reports.push(Report {
            key,
            slurm_id: m.slurm_id,
            bursar_id: m.bursar.clone(),
            run,
            at,
            what,
            het: m.het,
            reason: None,
        });
    }

    /// A pending job whose Slurm `Reason` differs from the one last sent: the reason rides on this
    /// poll's `job.queued` of the job if there is one, else on another (`What::Waits`). `None`
    /// (Slurm's word for a job not yet considered) is no reason.
    fn waits(&mut self, key: Key, m: &mut Memo, r: &Row) {
        if !matches!(r.phase(), Phase::Pending) || !matches!(m.last, Last::Queued | Last::Requeued) {
            return;
        }
        let why = r.reason.trim();
        if why.is_empty() || why == "None" || why == m.waits {
            return;
        }
        let queued =
            self.plan.reports.iter_mut().rev().find(|x| x.key == key && matches!(x.what, What::Queued | What::Moved));
        match queued {
            Some(q) => q.reason = Some(why.to_owned()),
            None => {
                m.waits_sent = m.waits_sent.saturating_add(1);
                self.report(key, m, m.restarts, self.now, What::Waits { n: m.waits_sent });
                if let Some(q) = self.plan.reports.last_mut() {
                    q.reason = Some(why.to_owned());
                }
            }
        }
        m.waits = why.to_owned();
    }

    /// A first sight: the memo the record's markers make, and `job.queued` for bursar's jobs.
    fn first_sight(&mut self, key: Key, r: &Row, kind: Kind) -> Option<Memo> {
        let d = self.details.get(&r.job_id)?;
        let mk = &d.markers;
        let mut m = match mk.bursar_id() {
            Some(id) => Memo::new(kind, id, r.job_id),
            None => {
                let kind = if mk.test_only {
                    self.plan.warnings.push(format!(
                        "Slurm job {} of {} carries the --test-only marker but exists: it was never reserved and stays held (scancel it, or clear its AdminComment to let it run outside bursar)",
                        r.job_id, r.user
                    ));
                    Kind::Forged
                } else {
                    if mk.unadmitted {
                        self.plan.warnings.push(format!(
                            "Slurm job {} of {} was let through without an admission (fail_open while bursar was unreachable)",
                            r.job_id, r.user
                        ));
                    }
                    Kind::Foreign
                };
                Memo::new(kind, "", r.job_id)
            }
        };
        m.partition = r.partition.clone();
        m.held = mk.hold;
        m.het = r.het_job_id.zip(r.het_offset);
        if kind == Kind::Array {
            m.slurm_id = key_array(key).unwrap_or(r.job_id);
        }
        if m.is_bursars() {
            if let (Some(old), Some(new)) = (&mk.job, &mk.readmit)
                && old != new
            {
                let mut gone = m.clone();
                gone.bursar = old.clone();
                self.report(key, &gone, 0, self.now, What::Replaced { by: new.clone() });
                self.report(key, &m, 0, self.now, What::Moved);
            } else {
                self.report(key, &m, 0, self.now, What::Queued);
            }
        }
        Some(m)
    }

    /// One job's or task's row against its memo: the events of the runs in between.
    fn step(&mut self, key: Key, mut m: Memo, r: &Row) -> Memo {
        let phase = r.phase();
        m.slurm_id = r.job_id;
        if m.last == Last::Running {
            let requeued = r.restarts > m.restarts;
            match phase {
                Phase::Running if !requeued => return m,
                Phase::Ended(status) if !requeued => {
                    let end = r.end.unwrap_or(self.now).max(m.start);
                    let run = m.restarts;
                    self.finish(key, &mut m, run, end, status, r);
                    return m;
                }
                _ => {
                    // Pending again, or a later run already running or over: the run ended. Its end is
                    // the poll that saw it, or the next run's start if that one is already under way,
                    // or the job's end if it ended since without running again.
                    let bound = match phase {
                        Phase::Pending => None,
                        Phase::Running => r.start,
                        Phase::Ended(_) if r.ran() => r.start,
                        Phase::Ended(_) => r.end,
                    };
                    let at = bound.map_or(self.now, |s| s.min(self.now)).max(m.start);
                    self.report(key, &m, m.restarts, at, What::Requeued);
                    m.last = Last::Requeued;
                }
            }
        }
        if m.last == Last::Finished {
            if r.restarts > m.restarts || !matches!(phase, Phase::Ended(_)) {
                let at = match r.start {
                    Some(s) if live(r) => s,
                    _ => self.now,
                };
                self.report(key, &m, r.restarts, at, What::Rerun);
                m.last = Last::Requeued;
                m.status = None;
                m.restarts = r.restarts;
            } else {
                return m;
            }
        }
        // Waiting (queued or requeued): does a run begin?
        match phase {
            Phase::Pending => {}
            Phase::Running if winding_down(m.restarts, r) => {}
            Phase::Running => self.start(key, &mut m, r),
            Phase::Ended(status) => {
                if r.ran() && r.start.is_some() {
                    self.start(key, &mut m, r);
                }
                let end = r.end.unwrap_or(self.now).max(m.start);
                self.finish(key, &mut m, r.restarts, end, status, r);
            }
        }
        m
    }

    fn start(&mut self, key: Key, m: &mut Memo, r: &Row) {
        // A run starts: bursar forgets why it waited, so the next wait's reason is sent again.
        m.waits.clear();
        let d = self.details.get(&r.job_id);
        let gpus = r.tres_gpus().or_else(|| d.and_then(|d| d.gpus));
        let mut released_by = d.and_then(|d| d.markers.released_by.clone());
        if let Some(d) = d {
            m.held = d.markers.hold;
        }
        // One override per admission: a job's own, or for a task its array's (the first task to run).
        match key {
            Key::Task(a, _) => {
                if let Some(mut parent) = self.memo(&Key::Array(a)) {
                    if parent.released_sent {
                        released_by = None;
                    } else if released_by.is_some() {
                        parent.released_sent = true;
                        self.put(&Key::Array(a), parent);
                    }
                }
            }
            _ => {
                if m.released_sent {
                    released_by = None;
                } else if released_by.is_some() {
                    m.released_sent = true;
                }
            }
        }
        let at = r.start.unwrap_or(self.now);
        m.start = self.clamp(at);
        m.restarts = r.restarts;
        m.last = Last::Running;
        let parent = m.parent.clone();
        self.report(key, m, r.restarts, at, What::Started { gpus, parent, released_by });
    }

    fn finish(&mut self, key: Key, m: &mut Memo, run: u32, at: i64, status: EndStatus, r: &Row) {
        self.report(
            key,
            m,
            run,
            at,
            What::Finished { status, slurm_state: r.state.clone(), exit_code: Some(r.exit_code) },
        );
        m.last = Last::Finished;
        m.status = Some(status);
        m.restarts = run;
    }
}

fn key_array(key: Key) -> Option<u64> {
    match key {
        Key::Task(a, _) | Key::Array(a) => Some(a),
        Key::Job(_) => None,
    }
}

/// The worse of two ends: failed over cancelled over succeeded.
fn worse(a: Option<EndStatus>, b: EndStatus) -> EndStatus {
    use EndStatus::*;
    match (a, b) {
        (Some(Failed), _) | (_, Failed) => Failed,
        (Some(Cancelled), _) | (_, Cancelled) => Cancelled,
        _ => Succeeded,
    }
}

/// What to send, given what was sent (`state`), the rows of this poll, the records read for them
/// ([`asks`]) and the time (Unix s). Pure: the agent's whole decision logic, tested without a cluster.
pub fn plan(state: &WatchState, rows: &[Row], details: &BTreeMap<u64, Details>, now: i64) -> Plan {
    let mut p = Planner { state, details, now, plan: Plan::default() };
    let mut listed: BTreeSet<String> = BTreeSet::new();
    // Arrays first: their parents must exist before their tasks.
    let mut arrays: BTreeMap<u64, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        if let Some(a) = key_array(r.key()) {
            arrays.entry(a).or_default().push(r);
        }
    }
    for (&a, of_array) in &arrays {
        let key = Key::Array(a);
        listed.insert(key.to_string());
        if p.memo(&key).is_none() {
            // Any record of the array carries its AdminComment; the one read is in `details`.
            let Some(r) = of_array.iter().find(|r| details.contains_key(&r.job_id)) else { continue };
            if let Some(m) = p.first_sight(key, r, Kind::Array) {
                p.put(&key, m);
            }
        }
    }
    for r in rows {
        let key = r.key();
        listed.insert(key.to_string());
        match key {
            Key::Array(_) => {}
            Key::Job(_) => {
                let m = match p.memo(&key) {
                    Some(m) => m,
                    None => match p.first_sight(key, r, Kind::Job) {
                        Some(m) => m,
                        None => continue,
                    },
                };
                if m.kind != Kind::Job {
                    p.put(&key, m);
                    continue;
                }
                let m = readmitted(&mut p, key, m, r);
                let mut m = p.step(key, m, r);
                p.waits(key, &mut m, r);
                p.put(&key, m);
            }
            Key::Task(a, t) => {
                let Some(parent) = p.memo(&Key::Array(a)) else { continue };
                if parent.kind != Kind::Array {
                    continue;
                }
                let m = p.memo(&key).unwrap_or_else(|| {
                    let mut m = Memo::new(Kind::Task, format!("{}_{t}", parent.bursar), r.job_id);
                    m.parent = Some(parent.bursar.clone());
                    m
                });
                let m = p.step(key, m, r);
                p.put(&key, m);
            }
        }
    }
    // An array ends when none of its records waits or runs any more.
    for (&a, of_array) in &arrays {
        let key = Key::Array(a);
        let Some(mut m) = p.memo(&key) else { continue };
        if m.kind != Kind::Array || m.last == Last::Finished {
            continue;
        }
        if of_array.iter().any(|r| !matches!(r.phase(), Phase::Ended(_))) {
            continue;
        }
        let mut status = None;
        for r in of_array {
            if let Phase::Ended(s) = r.phase() {
                status = Some(worse(status, s));
            }
        }
        let end = of_array.iter().filter_map(|r| r.end).max().unwrap_or(now);
        let status = status.unwrap_or(EndStatus::Cancelled);
        p.report(key, &m, 0, end, What::Finished { status, slurm_state: "array ended".into(), exit_code: None });
        m.last = Last::Finished;
        m.status = Some(status);
        p.put(&key, m);
    }
    // What is no longer listed: tasks and jobs first, then arrays (a parent ends after its tasks).
    let gone = state.jobs.iter().filter(|(k, _)| !listed.contains(*k));
    let (arrays_gone, others_gone): (Vec<_>, Vec<_>) = gone.partition(|(_, m)| m.kind == Kind::Array);
    for (k, m) in others_gone.into_iter().chain(arrays_gone) {
        let Some(key) = Key::parse(k) else {
            p.plan.forget.push(k.clone());
            continue;
        };
        let gone_while = m.last;
        let unseen_end = matches!(gone_while, Last::Running | Last::Requeued)
            || (gone_while == Last::Queued && matches!(m.kind, Kind::Job | Kind::Array));
        if m.is_bursars() && unseen_end {
            let mut m = m.clone();
            let status =
                if m.kind == Kind::Array { m.status.unwrap_or(EndStatus::Cancelled) } else { EndStatus::Cancelled };
            let run = m.restarts;
            p.report(key, &m, run, now, What::Finished { status, slurm_state: "unknown".into(), exit_code: None });
            m.last = Last::Finished;
            m.status = Some(status);
            p.put(&key, m);
        } else {
            p.plan.forget.push(k.clone());
        }
    }
    p.plan
}

/// A partition change the hook re-admitted: the old admission ends, the new one is confirmed.
fn readmitted(p: &mut Planner<'_>, key: Key, mut m: Memo, r: &Row) -> Memo {
    if r.partition.is_empty() || r.partition == m.partition {
        return m;
    }
    let Some(d) = p.details.get(&r.job_id) else { return m };
    m.partition = r.partition.clone();
    if let Some(new) = d.markers.bursar_id().filter(|n| *n != m.bursar) {
        let new = new.to_owned();
        p.report(key, &m, m.restarts, p.now, What::Replaced { by: new.clone() });
        m.bursar = new;
        p.report(key, &m, m.restarts, p.now, What::Moved);
    }
    m
}

/// Settings of `bursar slurm watch`.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// serve.
    pub server: Server,
    /// The Slurm commands.
    pub slurm: Slurm,
    /// Cluster name used in event ids.
    pub cluster: String,
    /// The state file.
    pub state: PathBuf,
    /// Time between two polls (at least; see [`next_interval`]).
    pub interval: Duration,
    /// Read the nodes every this many polls (and at the first) and send `pool.inventory` when the
    /// rows changed; 0: never.
    pub nodes_every: u32,
    /// The region the inventory's rows name (a pool or cluster).
    pub region: String,
    /// GRES types to GPU types (`h100` → `H100-SXM`), as the submit hook's `gpu_types`.
    pub gpu_types: BTreeMap<String, String>,
    /// Where to write the GPUs of each partition's largest node at every read of the nodes, for the
    /// submit hook's `--exclusive` ([`crate::node_gpus`]); `None`: nowhere.
    pub node_gpus_file: Option<PathBuf>,
}

/// The inventory last sent, so an unchanged one is not sent again.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    rows: Option<Vec<bursar_model::CapacityRow>>,
    polls: u32,
    mig: bool,
}

impl Sent {
    /// Whether the last read of the nodes found MIG GRES types (then `tres-alloc`'s untyped GPU
    /// count is not taken for a job's GPUs: [`Row::mig_pool`]).
    pub fn mig_pool(&self) -> bool {
        self.mig
    }
}

/// Every [`WatchConfig::nodes_every`] polls: reads the nodes, writes the largest node's GPUs per
/// partition to [`WatchConfig::node_gpus_file`] when they changed (before serve is asked anything: the
/// hook needs the file whether or not serve is up), and sends `pool.inventory` when the rows differ
/// from the last sent. Returns whether one was sent. A failed read or write is logged, not fatal: the
/// queue matters more than the inventory.
pub fn inventory_once(cfg: &WatchConfig, sent: &mut Sent) -> Result<bool> {
    if cfg.nodes_every == 0 {
        return Ok(false);
    }
    let due = sent.polls.is_multiple_of(cfg.nodes_every);
    sent.polls = sent.polls.wrapping_add(1);
    if !due {
        return Ok(false);
    }
    let nodes = match cfg.slurm.nodes() {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the nodes for the inventory; the queue is still watched");
            return Ok(false);
        }
    };
    sent.mig = nodes.iter().any(crate::nodes::Node::has_mig);
    if let Some(path) = &cfg.node_gpus_file {
        let largest = crate::node_gpus::largest_per_partition(&nodes);
        match crate::node_gpus::write(path, &largest) {
            Ok(true) => tracing::info!(file = %path.display(), partitions = largest.len(), "wrote the node GPUs file"),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "--exclusive jobs are admitted only with the hook's node_gpus"),
        }
    }
    let rows = crate::nodes::inventory(&nodes, &cfg.region, &cfg.gpu_types);
    if sent.rows.as_ref() == Some(&rows) || rows.is_empty() {
        return Ok(false);
    }
    let now_ms = unix_now().saturating_mul(1000);
    let inv = bursar_model::Inventory {
        id: format!("slurm-{}-inventory-{now_ms}", cfg.cluster),
        time: bursar_model::Timestamp(now_ms),
        source: Some(format!("slurm:{}", cfg.cluster)),
        capacity: rows.clone(),
    };
    cfg.server.post(&[Input::Inventory(inv)])?;
    tracing::info!(rows = rows.len(), "sent the inventory");
    sent.rows = Some(rows);
    Ok(true)
}

/// What one poll did and cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Rows squeue listed.
    pub listed: usize,
    /// Events sent.
    pub sent: usize,
    /// Of those, events serve had already seen.
    pub duplicates: u64,
    /// `scontrol show job` calls.
    pub scontrol_calls: usize,
    /// Whether the queue was read as JSON this poll.
    pub dumped: bool,
    /// Wall time of the poll, milliseconds.
    pub took_ms: u64,
}

/// One poll: list, read what is new, plan, send, persist; then release the admissions Slurm never
/// created ([`never_created`]), when a poll began at `previous` (Unix seconds) before this one.
/// `mig_pool`: the nodes have MIG GRES types ([`Sent::mig_pool`]; see [`Row::mig_pool`]).
pub fn poll_once(
    cfg: &WatchConfig,
    state: &mut WatchState,
    previous: Option<i64>,
    mig_pool: bool,
) -> Result<PollReport> {
    let t0 = Instant::now();
    let mut rows = cfg.slurm.queue()?;
    for r in &mut rows {
        r.mig_pool = mig_pool;
    }
    let read = cfg.slurm.details(&asks(state, &rows), rows.len())?;
    if let Some(why) = &read.dumped {
        tracing::info!(why = %why, "read the queue as JSON");
    }
    let plan = plan(state, &rows, &read.jobs, unix_now());
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }
    let events: Vec<Input> = plan.reports.iter().map(|r| Input::Event(r.to_event(&cfg.cluster))).collect();
    let posted = cfg.server.post(&events)?;
    if plan.changed() {
        plan.apply(state);
        state::save(&cfg.state, state)?;
    }
    let mut released = 0;
    if let Some(previous) = previous {
        match cfg.server.client.unconfirmed(&format!("{}-", cfg.cluster)) {
            Ok(view) => {
                let phantoms = never_created(state, &view, previous, &cfg.cluster, unix_now());
                for e in &phantoms {
                    tracing::info!(job = e.kind.job_id().unwrap_or(""), "released an admission Slurm never created");
                }
                let inputs: Vec<Input> = phantoms.into_iter().map(Input::Event).collect();
                released = cfg.server.post(&inputs)?.accepted;
            }
            Err(e) => tracing::warn!(
                error = %e,
                "cannot list the unconfirmed admissions (the watcher's principal needs `read`): admissions Slurm never created are released only after confirm_within_s"
            ),
        }
    }
    Ok(PollReport {
        listed: rows.len(),
        sent: events.len() + usize::try_from(released).unwrap_or(0),
        duplicates: posted.duplicates,
        scontrol_calls: read.scontrol_calls,
        dumped: read.dumped.is_some(),
        took_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// The admissions of `view` (serve's unconfirmed ones of this cluster) that Slurm never created: admitted
/// before the poll that began at `previous` (a second of margin for the two clocks), and found by
/// neither that poll nor this one (`state` is what this poll saw). Each becomes a `job.finished`
/// (`cancelled`, `slurm_state: "never created"`, with the reason), under an id derived from the job,
/// so a resend is a duplicate.
pub fn never_created(
    state: &WatchState,
    view: &bursar_model::api::UnconfirmedView,
    previous: i64,
    cluster: &str,
    now: i64,
) -> Vec<bursar_model::Event> {
    let seen: BTreeSet<&str> = state.jobs.values().map(|m| m.bursar.as_str()).filter(|b| !b.is_empty()).collect();
    view.jobs
        .iter()
        .filter(|j| !seen.contains(j.job_id.as_str()))
        .filter_map(|j| {
            let admitted = bursar_model::Timestamp::parse(&j.admitted).ok()?.millis().div_euclid(1000);
            (admitted + 1 < previous).then_some(j)
        })
        .map(|j| {
            let mut extra = bursar_model::Extra::new();
            crate::events::field(&mut extra, "slurm_cluster", cluster);
            crate::events::field(&mut extra, "slurm_state", "never created");
            crate::events::field(
                &mut extra,
                "reason",
                format!(
                    "admitted at {} and not in Slurm's queue in two polls since: Slurm never created it (a refused partition, a denied heterogeneous component, a --test-only without cli_filter.lua)",
                    j.admitted
                ),
            );
            bursar_model::Event {
                id: format!("slurm-{cluster}-never-created-{}", j.job_id),
                time: bursar_model::Timestamp(now.saturating_mul(1000)),
                kind: bursar_model::EventKind::JobFinished {
                    job_id: j.job_id.clone(),
                    status: bursar_model::FinishStatus::Cancelled,
                },
                extra,
            }
        })
        .collect()
}

/// The wait before the next poll: the configured interval, stretched so the watcher spends at most
/// a quarter of its time polling (a poll that took `took` waits at least 3 × `took`). On a queue of
/// 20,000 jobs a poll takes about 0.4 s (docs/perf/slurm.md), so a 2 s interval holds; a slow
/// slurmctld lengthens it.
pub fn next_interval(configured: Duration, took: Duration) -> Duration {
    configured.max(took.saturating_mul(3))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Polls forever (or once), logging and retrying failed polls; returns only on a state-file error,
/// which a retry would not fix.
pub fn run(cfg: &WatchConfig, once: bool) -> Result<PollReport> {
    let mut state = state::load(&cfg.state)?;
    tracing::info!(state = %cfg.state.display(), known = state.jobs.len(), "slurm watch starting");
    // When the last poll that went through began: the next one may release what neither found.
    let mut previous: Option<i64> = None;
    let mut sent = Sent::default();
    loop {
        let t0 = Instant::now();
        let began = unix_now();
        if let Err(e) = inventory_once(cfg, &mut sent) {
            tracing::warn!(error = %e, "could not send the inventory; retrying at the next read");
        }
        match poll_once(cfg, &mut state, previous, sent.mig_pool()) {
            Ok(r) => {
                previous = Some(began);
                if r.sent > 0 || r.dumped {
                    tracing::info!(
                        listed = r.listed,
                        sent = r.sent,
                        duplicates = r.duplicates,
                        scontrol = r.scontrol_calls,
                        took_ms = r.took_ms,
                        "sent job events"
                    );
                }
                if once {
                    return Ok(r);
                }
            }
            Err(e @ Error::Agent(bursar_agent::Error::State { .. })) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "poll failed; retrying");
                if once {
                    return Err(e);
                }
            }
        }
        std::thread::sleep(next_interval(cfg.interval, t0.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    //! The state machine over states the captures do not hold (SUSPENDED, PREEMPTED without requeue,
    //! NODE_FAIL, OUT_OF_MEMORY, a restart count that jumps, a rerun first seen running, a job that
    //! vanished, a forged `--test-only` marker, a partition change): rows built from a real row of the
    //! lab with the state fields changed. The real sequences are in tests/watch_sequences.rs.
    use super::*;
    use crate::detail::Markers;
    use crate::queue::parse_rows;

    const ROWS: &str = include_str!("../tests/data/squeue-O-22.05.txt");
    const T: i64 = 1_796_417_600;

    /// Job 33's real row with `state`, `restarts`, start and end (offsets from T), batch host.
    fn row(state: &str, restarts: u32, start: Option<i64>, end: Option<i64>, ran: bool) -> Row {
        let mut r = parse_rows(ROWS).unwrap().into_iter().find(|r| r.job_id == 33).unwrap();
        r.state = state.into();
        r.restarts = restarts;
        r.start = start.map(|s| T + s);
        r.end = end.map(|e| T + e);
        r.batch_host = ran.then(|| "n1".into());
        r
    }

    fn details(markers: Markers, gpus: Option<u32>) -> BTreeMap<u64, Details> {
        let gpus = gpus.map(bursar_model::Gpus::whole);
        BTreeMap::from([(33, Details { job_id: 33, admin_comment: String::new(), markers, gpus })])
    }

    fn admitted(id: &str) -> Markers {
        Markers { job: Some(id.into()), ..Markers::default() }
    }

    /// Runs polls (row, now offset) from an empty state; returns `<what> r<run> @<offset>` lines.
    fn story(markers: Markers, polls: &[(Row, i64)]) -> Vec<String> {
        let mut state = WatchState::default();
        let d = details(markers, Some(2));
        let mut out = Vec::new();
        for (r, now) in polls {
            let p = plan(&state, std::slice::from_ref(r), &d, T + now);
            for rep in &p.reports {
                let w = match &rep.what {
                    What::Queued | What::Moved => "queued".to_owned(),
                    What::Started { .. } => "started".to_owned(),
                    What::Requeued => "requeued".to_owned(),
                    What::Rerun => "rerun".to_owned(),
                    What::Finished { status, .. } => format!("finished {}", status.as_str()),
                    What::Replaced { by } => format!("replaced {by}"),
                    What::Waits { n } => format!("waits {n}"),
                };
                out.push(format!("{w} r{} @{}", rep.run, rep.at - T));
            }
            p.apply(&mut state);
        }
        out
    }

    /// Issue 53: Slurm's reason a pending job waits rides on its first `job.queued`; a changed
    /// reason is another `job.queued` (`waits N`); an unchanged one, or `None`, sends nothing.
    #[test]
    fn a_pending_jobs_reason_is_sent_when_it_changes() {
        let pend = |why: &str| {
            let mut r = row("PENDING", 0, None, None, false);
            r.reason = why.into();
            r
        };
        let mut state = WatchState::default();
        let d = details(admitted("lab-33"), None);
        let mut sent = Vec::new();
        for (r, now) in [(pend("None"), 1), (pend("Priority"), 2), (pend("Priority"), 3), (pend("Resources"), 4)] {
            let p = plan(&state, std::slice::from_ref(&r), &d, T + now);
            for rep in &p.reports {
                let e = rep.to_event("lab");
                let why = e.extra.iter().find(|(k, _)| k == "reason").map(|(_, v)| v.get().to_owned());
                sent.push(format!("{} {}", e.id, why.unwrap_or_default()));
            }
            p.apply(&mut state);
        }
        assert_eq!(
            sent,
            ["slurm-lab-33-queued ", "slurm-lab-33-waits-1 \"Priority\"", "slurm-lab-33-waits-2 \"Resources\"",]
        );
        // First seen already waiting for a reason: on the job.queued itself.
        let p = plan(&WatchState::default(), &[pend("Resources")], &d, T);
        assert_eq!(p.reports.len(), 1);
        assert_eq!(p.reports[0].reason.as_deref(), Some("Resources"));
    }

    #[test]
    fn state_sequences_slurm_can_produce() {
        let pend = |r| row("PENDING", r, Some(5000), Some(9000), false);
        type Case = (&'static str, Vec<(Row, i64)>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "suspended and resumed: one run",
                vec![
                    (row("RUNNING", 0, Some(1), None, true), 2),
                    (row("SUSPENDED", 0, Some(1), None, true), 4),
                    (row("RUNNING", 0, Some(1), None, true), 6),
                    (row("COMPLETED", 0, Some(1), Some(9), true), 10),
                ],
                vec!["queued r0 @2", "started r0 @1", "finished succeeded r0 @9"],
            ),
            (
                "preempted without requeue (PreemptMode=CANCEL): an end",
                vec![(row("RUNNING", 0, Some(1), None, true), 2), (row("PREEMPTED", 0, Some(1), Some(3), true), 4)],
                vec!["queued r0 @2", "started r0 @1", "finished cancelled r0 @3"],
            ),
            (
                "node failure without requeue, out of memory: failures",
                vec![(row("RUNNING", 0, Some(1), None, true), 2), (row("NODE_FAIL", 0, Some(1), Some(3), true), 4)],
                vec!["queued r0 @2", "started r0 @1", "finished failed r0 @3"],
            ),
            (
                "requeued twice between two polls, running again: one requeue, the new run",
                vec![(row("RUNNING", 0, Some(1), None, true), 2), (row("RUNNING", 2, Some(7), None, true), 8)],
                vec!["queued r0 @2", "started r0 @1", "requeued r0 @7", "started r2 @7"],
            ),
            (
                "a finished job first seen running again (a rerun between polls)",
                vec![
                    (row("COMPLETED", 0, Some(1), Some(3), true), 4),
                    (row("RUNNING", 1, Some(6), None, true), 8),
                    (row("FAILED", 1, Some(6), Some(9), true), 10),
                ],
                vec![
                    "queued r0 @4",
                    "started r0 @1",
                    "finished succeeded r0 @3",
                    "rerun r1 @6",
                    "started r1 @6",
                    "finished failed r1 @9",
                ],
            ),
            (
                // Regression: the COMPLETING right after a requeue (RestartCnt already 1) was taken for
                // the start of run 1; the real run 1 then reused its id and was dropped as a resend.
                "requeued: COMPLETING with the new RestartCnt is the old run winding down",
                vec![
                    (row("RUNNING", 0, Some(1), None, true), 2),
                    (row("COMPLETING", 1, Some(3), Some(600), true), 4),
                    (row("PENDING", 1, Some(120), Some(700), false), 6),
                    (row("RUNNING", 1, Some(7), None, true), 8),
                    (row("COMPLETED", 1, Some(7), Some(12), true), 14),
                ],
                vec!["queued r0 @2", "started r0 @1", "requeued r0 @3", "started r1 @7", "finished succeeded r1 @12"],
            ),
            (
                "first seen winding down after a requeue: no run until it runs again",
                vec![(row("COMPLETING", 1, Some(3), Some(600), true), 4), (row("RUNNING", 1, Some(7), None, true), 8)],
                vec!["queued r0 @4", "started r1 @7"],
            ),
            (
                "requeued, then cancelled while pending: the pending gap is not charged",
                vec![
                    (row("RUNNING", 0, Some(1), None, true), 2),
                    (pend(1), 4),
                    (row("CANCELLED", 1, Some(6), Some(6), false), 8),
                ],
                vec!["queued r0 @2", "started r0 @1", "requeued r0 @4", "finished cancelled r1 @6"],
            ),
            (
                "expected times of a pending job are never sent, nor any future time",
                vec![(pend(0), 2), (row("RUNNING", 0, Some(50), None, true), 3)],
                vec!["queued r0 @2", "started r0 @3"],
            ),
            (
                "cancelled before it ever started",
                vec![(pend(0), 2), (row("CANCELLED", 0, Some(3), Some(3), false), 4)],
                vec!["queued r0 @2", "finished cancelled r0 @3"],
            ),
            (
                "ended with a time past the clock: clamped",
                vec![(row("RUNNING", 0, Some(1), None, true), 2), (row("COMPLETED", 0, Some(1), Some(90), true), 5)],
                vec!["queued r0 @2", "started r0 @1", "finished succeeded r0 @5"],
            ),
        ];
        for (name, polls, want) in cases {
            assert_eq!(story(admitted("lab-1"), &polls), want, "{name}");
        }
    }

    #[test]
    fn a_job_that_vanished_while_running_is_finished_once_as_unknown() {
        let mut state = WatchState::default();
        let d = details(admitted("lab-1"), Some(2));
        plan(&state, &[row("RUNNING", 0, Some(1), None, true)], &d, T + 2).apply(&mut state);
        let p = plan(&state, &[], &d, T + 400);
        assert_eq!(p.reports.len(), 1);
        assert!(matches!(&p.reports[0].what, What::Finished { slurm_state, .. } if slurm_state == "unknown"));
        assert_eq!(p.reports[0].at, T + 400);
        p.apply(&mut state);
        let p = plan(&state, &[], &d, T + 402);
        assert!(p.reports.is_empty());
        assert_eq!(p.forget, ["33"]);
    }

    #[test]
    fn a_forged_test_only_marker_and_jobs_without_a_mark_send_nothing() {
        let forged = Markers { test_only: true, ..Markers::default() };
        let r = row("PENDING", 0, None, None, false);
        let p = plan(&WatchState::default(), std::slice::from_ref(&r), &details(forged, None), T);
        assert!(p.reports.is_empty());
        assert!(p.warnings[0].contains("--test-only marker but exists"), "{:?}", p.warnings);
        assert_eq!(p.updates["33"].kind, Kind::Forged);
        let p = plan(&WatchState::default(), std::slice::from_ref(&r), &details(Markers::default(), None), T);
        assert!(p.reports.is_empty() && p.warnings.is_empty());
        assert_eq!(p.updates["33"].kind, Kind::Foreign);
        let mut state = WatchState::default();
        p.apply(&mut state);
        // Read once: a foreign job asks for no record on later polls, even when it starts.
        assert!(asks(&state, &[row("RUNNING", 0, Some(1), None, true)]).is_empty());
    }

    #[test]
    fn a_partition_change_the_hook_readmitted_replaces_the_admission() {
        let mut state = WatchState::default();
        let r = row("PENDING", 0, None, None, false);
        plan(&state, std::slice::from_ref(&r), &details(admitted("lab-old"), None), T).apply(&mut state);
        let mut moved = r.clone();
        moved.partition = "other".into();
        assert_eq!(asks(&state, std::slice::from_ref(&moved)).len(), 1, "a partition change reads the record");
        let readmit = Markers { job: Some("lab-old".into()), readmit: Some("lab-new".into()), ..Markers::default() };
        let p = plan(&state, std::slice::from_ref(&moved), &details(readmit, None), T + 5);
        // The new id's `job.queued` has an event id of its own: the first admission's `queued` took the
        // job's plain one, and serve would drop a second as a duplicate (the move never confirmed).
        let ids: Vec<String> = p.reports.iter().map(|r| r.event_id("lab")).collect();
        assert_eq!(ids[1], "slurm-lab-33-queued-lab-new", "{ids:?}");
        let got: Vec<(String, String)> =
            p.reports.iter().map(|r| (r.bursar_id.clone(), format!("{:?}", r.what))).collect();
        assert_eq!(
            got,
            [
                ("lab-old".to_owned(), "Replaced { by: \"lab-new\" }".to_owned()),
                ("lab-new".to_owned(), "Moved".to_owned())
            ]
        );
        p.apply(&mut state);
        assert_eq!(state.find("lab-new").map(|(k, _)| k), Some(Key::Job(33)));
        assert!(state.find("lab-old").is_none());
    }

    #[test]
    fn the_interval_stretches_with_the_poll() {
        let s = Duration::from_secs;
        assert_eq!(next_interval(s(2), Duration::from_millis(300)), s(2));
        assert_eq!(next_interval(s(2), s(3)), s(9));
    }

    /// Issue 55: an admission Slurm never created is released once two polls have not found it —
    /// not one that either poll found, and not one admitted after the earlier poll began.
    #[test]
    fn admissions_slurm_never_created_are_released_after_two_polls() {
        let mut state = WatchState::default();
        state.jobs.insert("17".into(), Memo::new(Kind::Job, "lab-seen", 17));
        let at = |secs: i64| bursar_model::Timestamp(secs * 1000).to_string();
        let job = |id: &str, admitted: i64| bursar_model::api::UnconfirmedJob {
            job_id: id.into(),
            admitted: at(admitted),
            confirm_by: at(admitted + 900),
        };
        let view = bursar_model::api::UnconfirmedView {
            engine_time: at(T),
            jobs: vec![job("lab-seen", T - 60), job("lab-phantom", T - 60), job("lab-new", T - 1)],
        };
        let out = never_created(&state, &view, T, "lab", T + 2);
        assert_eq!(out.len(), 1, "{out:?}");
        let e = &out[0];
        assert_eq!(e.id, "slurm-lab-never-created-lab-phantom");
        assert!(
            matches!(&e.kind, bursar_model::EventKind::JobFinished { job_id, status } if job_id == "lab-phantom" && *status == bursar_model::FinishStatus::Cancelled)
        );
        assert!(e.to_json().contains("never created") && e.to_json().contains("two polls"), "{}", e.to_json());
        assert_eq!(bursar_model::decode_event(&e.to_json()).unwrap(), *e, "a v1 event");
    }
}
