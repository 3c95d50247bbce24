//! The two-step reservation (`bursar_engine::shared`) against one engine, without NATS: the same
//! random stream of submissions (some of them arrays), starts (some naming a different allocation),
//! requeues, array tasks' starts and ends, finishes, approvals, rejections, billing charges and clock
//! ticks given to one engine and to three project partitions (routed by the cluster's own project
//! hash) that consult one ledger partition's engine, in process. Every decision about every job must
//! be the same (kind, policies, sentence), and the ledgers spanning projects the same at the end.
//!
//! What NATS adds (resends, failover, fencing) is `crates/cli/tests/cluster.rs`'s; this test pins the
//! arithmetic and the protocol: ops applied once by id, a resent admission answered with its first
//! answer, a ledger partition restored from its snapshot mid-stream going on as if nothing happened.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "a test")]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bursar_cluster::partition::partition_of;
use bursar_engine::{Engine, LedgerAnswer, LedgerClient, PolicySet, ScopeKind};
use bursar_model::{Decision, Input, LedgerOp, Timestamp, WallTick, decode_input};
use proptest::prelude::*;

const PARTITIONS: u32 = 3;
/// Partitions 2, 1, 0 (team search), 2, 1 (team perception), 0 (no team), by the cluster's hash.
const PROJECTS: [&str; 6] = ["nlp", "tts", "ranking", "vision", "video", "audio"];
const USERS: [&str; 3] = ["alice", "bob", "dana"];

fn policies() -> Arc<PolicySet> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/shared-ledgers/policies");
    let set = bursar_loader::load_dir(&dir, &bursar_loader::NoComponents).expect("the shared-ledgers policies compile");
    assert!(set.has_spanning(), "the set has quotas that span projects");
    Arc::new(set)
}

/// The ledger partition, as the project partitions reach it: ops queued by `settle` are applied in
/// order before the next admission and whenever the partition "journals" ([`Ledger::sync`]).
#[derive(Debug, Clone)]
struct Ledger {
    engine: Arc<Mutex<Engine>>,
    queued: Arc<Mutex<Vec<LedgerOp>>>,
    /// Every op applied since the last snapshot, in order (to resend some and check they change
    /// nothing, and to replay after a failover).
    applied: Arc<Mutex<Vec<LedgerOp>>>,
    /// The first answer each admission op got.
    answers: Arc<Mutex<HashMap<String, LedgerAnswer>>>,
}

impl Ledger {
    fn apply(&self, op: LedgerOp) -> Option<LedgerAnswer> {
        let mut e = self.engine.lock().unwrap();
        let mut out = Vec::new();
        e.apply(&Input::Ledger(op.clone()), None, &mut out);
        assert!(out.is_empty(), "the ledger partition makes no decision of its own: {out:?}");
        let answer = e.ledger_answer().cloned();
        if let Some(a) = &answer {
            self.answers.lock().unwrap().entry(op.id.clone()).or_insert_with(|| a.clone());
        }
        self.applied.lock().unwrap().push(op);
        answer
    }

    fn sync(&self) {
        let ops: Vec<LedgerOp> = std::mem::take(&mut *self.queued.lock().unwrap());
        for op in ops {
            self.apply(op);
        }
    }
}

impl LedgerClient for Ledger {
    fn admit(&mut self, op: LedgerOp) -> Result<LedgerAnswer, String> {
        self.sync();
        self.apply(op).ok_or_else(|| "the ledger partition gave no answer".to_owned())
    }

    fn settle(&mut self, op: LedgerOp) {
        self.queued.lock().unwrap().push(op);
    }
}

#[derive(Debug, Clone)]
enum Step {
    Submit {
        project: usize,
        user: usize,
        gpus: u32,
        hours: u32,
        /// An array: tasks and how many may run at once.
        array: Option<(u32, Option<u32>)>,
    },
    /// A start, naming the allocation or not.
    Start(usize, Option<u32>),
    /// A running job's run ends and it waits to run again (or a finished one is rerun).
    Requeue(usize),
    /// Task `k` of an array starts (its first start creates it).
    Task(usize, u32),
    /// Task `k` of an array ends.
    TaskEnd(usize, u32, bool),
    Finish(usize, bool),
    Grant(usize),
    Reject(usize),
    Charge(usize, u32),
    Tick,
    /// Resend an op the ledger partition applied before (a front end's retry after a failover).
    Resend(usize),
    /// The ledger partition's owner dies; the next one restores its last snapshot.
    Failover,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            0..PROJECTS.len(),
            0..USERS.len(),
            1u32..9,
            1u32..25,
            prop_oneof![4 => Just(None), 1 => (1u32..6, proptest::option::of(1u32..3)).prop_map(Some)]
        )
            .prop_map(|(project, user, gpus, hours, array)| Step::Submit { project, user, gpus, hours, array }),
        3 => (any::<usize>(), proptest::option::of(1u32..12)).prop_map(|(j, g)| Step::Start(j, g)),
        1 => any::<usize>().prop_map(Step::Requeue),
        2 => (any::<usize>(), 0u32..6).prop_map(|(j, k)| Step::Task(j, k)),
        2 => (any::<usize>(), 0u32..6, any::<bool>()).prop_map(|(j, k, ok)| Step::TaskEnd(j, k, ok)),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(j, ok)| Step::Finish(j, ok)),
        2 => any::<usize>().prop_map(Step::Grant),
        1 => any::<usize>().prop_map(Step::Reject),
        1 => (any::<usize>(), 1u32..40).prop_map(|(j, h)| Step::Charge(j, h)),
        1 => Just(Step::Tick),
        1 => any::<usize>().prop_map(Step::Resend),
        1 => Just(Step::Failover),
    ]
}

/// A decision as both sides must agree on it. Not the event it is attributed to: a timer one engine
/// fires on the next event of any project, a partition fires on its own next input or wall tick
/// (every second in `serve --cluster`; here, a wall tick at each event's time), and a clock tick's
/// copy for partition `n` is `e@pN`.
fn seen(d: &Decision) -> String {
    let policies: Vec<&str> = d.policies.iter().map(|p| &**p).collect();
    format!(
        "{} admission={} until={:?} policies={policies:?} reason={:?} gpu_hours={:?}",
        d.decision.as_str(),
        d.admission,
        d.until,
        d.reason,
        d.gpu_hours
    )
}

/// Decisions by job, in the order they were made (the order among jobs differs between one engine
/// and partitions only where nothing depends on it).
fn by_job(decisions: &[Decision]) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in decisions {
        let job = d.job_id.as_deref().unwrap_or("-").to_owned();
        m.entry(job).or_default().push(seen(d));
    }
    m
}

fn spanning_ledgers(e: &Engine) -> Vec<String> {
    let mut out = Vec::new();
    for kind in [ScopeKind::User, ScopeKind::Tag] {
        for (name, l) in e.state().ledgers(kind) {
            out.push(format!("{kind:?} {name}: held {} days {:?}", l.held_gpus, l.days));
        }
    }
    out.sort();
    out
}

/// Runs `steps` both ways, checks they agree, and returns one engine's decisions.
fn run(steps: &[(u32, Step)]) -> Result<Vec<Decision>, TestCaseError> {
    let set = policies();
    let mut one = Engine::new(set.clone());
    let ledger = Ledger {
        engine: Arc::new(Mutex::new(Engine::new(set.clone()))),
        queued: Arc::default(),
        applied: Arc::default(),
        answers: Arc::default(),
    };
    let mut parts: Vec<Engine> = (0..PARTITIONS)
        .map(|_| {
            let mut e = Engine::new(set.clone());
            e.set_ledger_client(Box::new(ledger.clone()));
            e
        })
        .collect();
    let (mut one_out, mut parts_out) = (Vec::new(), Vec::new());
    // Jobs submitted: id and project.
    let mut jobs: Vec<(String, &str)> = Vec::new();
    let mut t = Timestamp::parse("2026-11-27T08:00:00Z").unwrap().0;
    let mut snapshot = ledger.engine.lock().unwrap().snapshot();
    for (n, (minutes, s)) in steps.iter().enumerate() {
        t += i64::from(*minutes) * 60_000;
        let time = Timestamp(t).to_string();
        let id = format!("e{n}");
        let job = |i: usize| jobs.get(i % jobs.len().max(1)).cloned();
        let (line, project) = match s {
            Step::Submit { project, user, gpus, hours, array } => {
                let (p, u) = (PROJECTS[*project], USERS[*user]);
                let j = format!("j{n}");
                jobs.push((j.clone(), p));
                let array = match array {
                    Some((tasks, Some(max))) => format!(r#","array":{{"tasks":{tasks},"max_running":{max}}}"#),
                    Some((tasks, None)) => format!(r#","array":{{"tasks":{tasks}}}"#),
                    None => String::new(),
                };
                (
                    format!(
                        r#"{{"id":"{id}","time":"{time}","type":"job.submitted","job":{{"id":"{j}","project":"{p}","user":"{u}","gpus":{gpus},"requested_hours":{hours}{array}}}}}"#
                    ),
                    Some(p),
                )
            }
            Step::Start(i, _)
            | Step::Requeue(i)
            | Step::Task(i, _)
            | Step::TaskEnd(i, _, _)
            | Step::Finish(i, _)
            | Step::Grant(i)
            | Step::Reject(i)
            | Step::Charge(i, _) => {
                let Some((j, p)) = job(*i) else { continue };
                let line = match s {
                    Step::Start(_, None) => {
                        format!(r#"{{"id":"{id}","time":"{time}","type":"job.started","job_id":"{j}"}}"#)
                    }
                    Step::Start(_, Some(g)) => {
                        format!(r#"{{"id":"{id}","time":"{time}","type":"job.started","job_id":"{j}","gpus":{g}}}"#)
                    }
                    Step::Requeue(_) => {
                        format!(r#"{{"id":"{id}","time":"{time}","type":"job.requeued","job_id":"{j}"}}"#)
                    }
                    Step::Task(_, k) => format!(
                        r#"{{"id":"{id}","time":"{time}","type":"job.started","job_id":"{j}_{k}","parent":"{j}"}}"#
                    ),
                    Step::TaskEnd(_, k, ok) => {
                        let status = if *ok { "succeeded" } else { "cancelled" };
                        format!(
                            r#"{{"id":"{id}","time":"{time}","type":"job.finished","job_id":"{j}_{k}","status":"{status}"}}"#
                        )
                    }
                    Step::Finish(_, ok) => {
                        let status = if *ok { "succeeded" } else { "failed" };
                        format!(
                            r#"{{"id":"{id}","time":"{time}","type":"job.finished","job_id":"{j}","status":"{status}"}}"#
                        )
                    }
                    Step::Grant(_) => {
                        format!(
                            r#"{{"id":"{id}","time":"{time}","type":"approval.granted","job_id":"{j}","by":"carol"}}"#
                        )
                    }
                    Step::Reject(_) => {
                        format!(
                            r#"{{"id":"{id}","time":"{time}","type":"approval.rejected","job_id":"{j}","by":"carol"}}"#
                        )
                    }
                    Step::Charge(_, h) => format!(
                        r#"{{"id":"{id}","time":"{time}","type":"billing.charge","project":"{p}","job_id":"{j}","gpu_hours":{h}.0,"amount":{h}.0}}"#
                    ),
                    _ => unreachable!(),
                };
                (line, Some(p))
            }
            Step::Tick => (format!(r#"{{"id":"{id}","time":"{time}","type":"clock.tick"}}"#), None),
            Step::Resend(i) => {
                // A resend comes seconds after the first copy (a link's attempt, a front end's retry at
                // the next owner), well inside the engine's dedupe window (24 hours of event time):
                // resend only what was applied in the last hour.
                let op = {
                    let applied = ledger.applied.lock().unwrap();
                    let recent: Vec<&LedgerOp> = applied.iter().filter(|op| op.time.0 >= t - 3_600_000).collect();
                    if recent.is_empty() {
                        continue;
                    }
                    recent[i % recent.len()].clone()
                };
                let before = spanning_ledgers(&ledger.engine.lock().unwrap());
                let first = ledger.answers.lock().unwrap().get(&op.id).cloned();
                let again = ledger.apply(op.clone());
                prop_assert_eq!(
                    spanning_ledgers(&ledger.engine.lock().unwrap()),
                    before,
                    "a resent op changes nothing"
                );
                if first.is_some() {
                    prop_assert_eq!(again, first, "a resent admission gets its first answer");
                }
                continue;
            }
            Step::Failover => {
                // What the ledger partition applied after its last snapshot is replayed by the next
                // owner from the journal: here, restore and apply those ops again, in order.
                let applied: Vec<LedgerOp> = ledger.applied.lock().unwrap().clone();
                let mut e = ledger.engine.lock().unwrap();
                let before = spanning_ledgers(&e);
                let mut restored = Engine::restore(set.clone(), snapshot.clone());
                for op in applied.iter() {
                    let mut out = Vec::new();
                    restored.apply(&Input::Ledger(op.clone()), None, &mut out);
                }
                prop_assert_eq!(spanning_ledgers(&restored), before, "the restored ledger partition is where it was");
                *e = restored;
                snapshot = e.snapshot();
                drop(e);
                ledger.applied.lock().unwrap().clear();
                continue;
            }
        };
        let input = decode_input(&line).expect("a valid line");
        one.apply(&input, Some(&line), &mut one_out);
        match project {
            Some(p) => {
                let home = partition_of(p, PARTITIONS) as usize;
                // The wall clock reaches every partition before an event dated then reaches its home:
                // the timers due by then (an approval's expiry, a stale reservation) fire everywhere
                // first, as they do in one engine before it applies the event.
                let order = (0..parts.len()).filter(|&k| k != home).chain(std::iter::once(home));
                for k in order {
                    let e = &mut parts[k];
                    if k == home {
                        e.apply(&input, Some(&line), &mut parts_out);
                    } else {
                        e.apply(&Input::WallTick(WallTick { time: Timestamp(t) }), None, &mut parts_out);
                    }
                    prop_assert!(e.ledger_failure().is_none(), "{:?}", e.ledger_failure());
                    ledger.sync();
                }
            }
            None => {
                for (k, e) in parts.iter_mut().enumerate() {
                    let copy = line.replace(&format!(r#""id":"{id}""#), &format!(r#""id":"{id}@p{k}""#));
                    let input = decode_input(&copy).expect("a valid copy");
                    e.apply(&input, Some(&copy), &mut parts_out);
                }
            }
        }
        // Before the partition journals what it applied, its changes reach the ledger partition.
        ledger.sync();
    }
    prop_assert_eq!(by_job(&one_out), by_job(&parts_out));
    prop_assert_eq!(spanning_ledgers(&one), spanning_ledgers(&ledger.engine.lock().unwrap()));
    let mismatches: u64 = parts.iter().map(Engine::ledger_mismatches).sum();
    prop_assert_eq!(mismatches, 0);
    Ok(one_out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn partitions_and_one_ledger_partition_decide_as_one_engine(
        steps in proptest::collection::vec((0u32..900, step()), 1..120)
    ) {
        run(&steps)?;
    }
}

/// The stream that makes each budget bite, spelled out: a user over budget across two projects in
/// two partitions, a team over its week across projects, an approval that then reserves, a finish
/// that frees the user's budget for the next job.
#[test]
fn each_spanning_budget_bites_across_partitions() {
    let (a, b) = (PROJECTS[0], PROJECTS[4]);
    assert_ne!(partition_of(a, PARTITIONS), partition_of(b, PARTITIONS), "two projects in two partitions");
    let mut steps = Vec::new();
    // alice: 8 × 24 = 192 in nlp, 8 × 24 in robotics (384), then 8 × 24 more: over 400, denied.
    for project in [0, 4, 0] {
        steps.push((1, Step::Submit { project, user: 0, gpus: 8, hours: 24, array: None }));
    }
    // The first finishes after an hour: 8 GPU-hours used, 184 freed; the next fits again.
    steps.push((0, Step::Start(0, None)));
    steps.push((60, Step::Finish(0, true)));
    steps.push((1, Step::Submit { project: 0, user: 0, gpus: 8, hours: 24, array: None }));
    // search (nlp, speech, ranking): bob and dana fill the team's week; then one needs carol.
    // 8 used + 192 reserved (j5) + 60 (j6) = 260 of 300; j7's 80 would reach 340.
    steps.push((1, Step::Submit { project: 1, user: 1, gpus: 4, hours: 15, array: None }));
    steps.push((1, Step::Submit { project: 2, user: 2, gpus: 8, hours: 10, array: None }));
    // carol grants j7 (the sixth job submitted): it reserves in the team's ledger.
    steps.push((1, Step::Grant(5)));
    steps.push((1, Step::Tick));
    let decided: Vec<(String, String)> = run(&steps)
        .unwrap()
        .iter()
        .filter(|d| d.admission)
        .map(|d| (d.job_id.as_deref().unwrap_or("-").to_owned(), format!("{} {:?}", d.decision.as_str(), d.policies)))
        .collect();
    let expected = [
        ("j0", "allow"),
        ("j1", "allow"),
        ("j2", "deny [\"quota/user-monthly\"]"),
        ("j5", "allow"),
        ("j6", "allow"),
        ("j7", "require_approval [\"quota/team-weekly\"]"),
    ];
    for (job, starts) in expected {
        let got = decided.iter().find(|(j, _)| j == job).map(|(_, d)| d.as_str()).unwrap_or("nothing");
        assert!(got.starts_with(starts), "{job}: expected {starts}, got {got} (all: {decided:?})");
    }
}
