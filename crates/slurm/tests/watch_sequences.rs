//! The watcher's state machine over Slurm's real state sequences: each file under `data/seq/` is a
//! series of polls captured on the two-node Slurm 22.05 lab (`### poll <unix time>` then the rows of
//! `squeue -O`, `### scontrol <id>` then `scontrol show job -d -o <id>`), one scenario each: a plain
//! run, requeue, rerun of a completed job, SPECIAL_EXIT, requeue-hold then cancel, an administrator's
//! release of a held job, cancel before start, failure, timeout, exclusive / multi-node / per-socket
//! GPUs, an array with a throttle and cancelled tasks, a heterogeneous job, preemption then a node
//! failure, jobs on MIG slices. The table says what bursar must be told for each; the properties say that any subset of
//! the polls (a slower watcher), and a restart between any two polls (from the saved state file, or
//! from a crash before it was saved), lose and double nothing.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed unwrap is the test failing, with its message")]

use std::collections::{BTreeMap, BTreeSet};

use bursar_slurm::detail::{Details, parse_scontrol};
use bursar_slurm::events::{Report, What};
use bursar_slurm::queue::{Row, parse_rows};
use bursar_slurm::slurm::Ask;
use bursar_slurm::state::WatchState;
use bursar_slurm::watch::{asks, plan};
use proptest::prelude::*;

/// One captured poll.
#[derive(Debug, Clone)]
struct Poll {
    now: i64,
    rows: Vec<Row>,
    details: BTreeMap<u64, Details>,
}

fn capture(name: &str) -> Vec<Poll> {
    let path = format!("{}/tests/data/seq/{name}.txt", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut polls = Vec::new();
    for block in text.split("### poll ").skip(1) {
        let (head, rest) = block.split_once('\n').unwrap();
        let mut parts = rest.split("### scontrol ");
        let rows = parse_rows(parts.next().unwrap()).unwrap();
        let mut details = BTreeMap::new();
        for part in parts {
            let (id, out) = part.split_once('\n').unwrap();
            let id: u64 = id.trim().parse().unwrap();
            let Ask { records, .. } = Ask::for_row(&rows, id);
            if let Ok(read) = parse_scontrol(out, records) {
                for (job, d) in read {
                    details.insert(job, d.unwrap());
                }
            }
        }
        polls.push(Poll { now: head.trim().parse().unwrap(), rows, details });
    }
    polls
}

fn captures(names: &[&str]) -> Vec<Poll> {
    names.iter().flat_map(|n| capture(n)).collect()
}

/// One poll of the watcher: the records it would read, then the plan; applied as if serve accepted.
fn poll(state: &mut WatchState, p: &Poll) -> Vec<Report> {
    let needed = asks(state, &p.rows);
    let details: BTreeMap<u64, Details> =
        needed.iter().filter_map(|a| p.details.get(&a.job_id).map(|d| (a.job_id, d.clone()))).collect();
    let plan = plan(state, &p.rows, &details, p.now);
    let reports = plan.reports.clone();
    plan.apply(state);
    reports
}

fn run(polls: &[Poll]) -> Vec<Report> {
    let mut state = WatchState::default();
    polls.iter().flat_map(|p| poll(&mut state, p)).collect()
}

/// A report in a line: `<type> <key> r<run> @<time offset>` and its particulars.
fn line(r: &Report, t0: i64) -> String {
    let what = match &r.what {
        What::Queued | What::Moved => "queued".to_owned(),
        What::Started { gpus, parent, released_by } => format!(
            "started{}{}{}",
            gpus.map(|g| format!(" gpus={g}")).unwrap_or_default(),
            parent.as_ref().map(|_| " +parent").unwrap_or_default(),
            released_by.as_ref().map(|w| format!(" released_by={w}")).unwrap_or_default()
        ),
        What::Requeued => "requeued".to_owned(),
        What::Rerun => "rerun".to_owned(),
        What::Finished { status, slurm_state, .. } => format!("finished {} {slurm_state}", status.as_str()),
        What::Replaced { by } => format!("replaced by {by}"),
        What::Waits { n } => format!("waits {n} {}", r.reason.as_deref().unwrap_or("?")),
    };
    format!("{} r{} @{} {what}", r.key, r.run, r.at - t0)
}

fn lines(name: &[&str]) -> Vec<String> {
    let polls = captures(name);
    let t0 = polls[0].now;
    run(&polls).iter().map(|r| line(r, t0)).collect()
}

#[test]
fn each_scenario_tells_bursar_what_slurm_ran() {
    let table: &[(&[&str], &[&str])] = &[
        (&["plain"], &["33 r0 @0 queued", "33 r0 @0 started gpus=2", "33 r0 @4 finished succeeded COMPLETED"]),
        (
            &["requeue"],
            &[
                "34 r0 @0 queued",
                "34 r0 @0 started gpus=2",
                // The requeue is dated by the poll that saw it; the next run by its real start.
                "34 r0 @1 requeued",
                // Pending again, Slurm's reason: BeginTime (a requeued job waits out its delay).
                "34 r0 @1 waits 1 BeginTime",
                "34 r1 @2 started gpus=2",
                "34 r1 @8 finished succeeded COMPLETED",
            ],
        ),
        (
            &["rerun"],
            &[
                "35 r0 @0 queued",
                "35 r0 @-1 started gpus=4",
                "35 r0 @1 finished succeeded COMPLETED",
                "35 r1 @2 rerun",
                "35 r1 @2 started gpus=4",
                "35 r1 @4 finished succeeded COMPLETED",
            ],
        ),
        (
            &["specialexit"],
            &[
                "36 r0 @0 queued",
                "36 r0 @-1 started gpus=1",
                "36 r0 @0 requeued",
                "36 r0 @0 waits 1 job requeued in held state",
                "36 r1 @1 started gpus=1",
                "36 r1 @5 finished succeeded COMPLETED",
            ],
        ),
        (
            &["requeuehold"],
            &[
                "37 r0 @0 queued",
                "37 r0 @-1 started gpus=1",
                "37 r0 @0 requeued",
                "37 r0 @0 waits 1 job requeued in held state",
                "37 r1 @0 finished cancelled CANCELLED",
            ],
        ),
        (
            &["release"],
            &["38 r0 @0 queued", "38 r0 @0 started gpus=1 released_by=root", "38 r0 @3 finished succeeded COMPLETED"],
        ),
        (&["cancelled-pending"], &["39 r0 @0 queued", "39 r0 @0 finished cancelled CANCELLED"]),
        (&["failed"], &["40 r0 @0 queued", "40 r0 @-1 started gpus=1", "40 r0 @0 finished failed FAILED"]),
        (&["timeout"], &["41 r0 @0 queued", "41 r0 @0 started gpus=1", "41 r0 @29 finished failed TIMEOUT"]),
    ];
    for (files, want) in table {
        assert_eq!(lines(files), *want, "{files:?}");
    }
}

#[test]
fn gpus_are_what_slurm_allocated_not_what_the_hook_saw() {
    let got = lines(&["shapes"]);
    for want in
        ["42 r0 @-1 started gpus=8", "43 r0 @5 started gpus=4", "44 r0 @5 started gpus=1", "45 r0 @5 started gpus=3"]
    {
        assert!(got.iter().any(|l| l == want), "{want} not in {got:#?}");
    }
}

/// MIG slices (issue 55): four jobs on the lab's MIG node (SLURM_MIG=1) start with their share of a
/// GPU, not the count of slices: `--gres=gpu:1g.10gb:2` 2/7, `gpu:1g.10gb:1,gpu:3g.40gb:1` 4/7,
/// `--gpus=1g.10gb:4` 4/7, `gpu:3g.40gb:1` 3/7 (`JOB_GRES` read from each record).
#[test]
fn mig_slices_start_with_their_share() {
    assert_eq!(
        lines(&["mig"]),
        [
            "4 r0 @0 queued",
            "5 r0 @0 queued",
            "6 r0 @0 queued",
            "7 r0 @0 queued",
            "4 r0 @0 started gpus=2/7",
            "5 r0 @0 started gpus=4/7",
            "6 r0 @0 started gpus=4/7",
            "7 r0 @0 started gpus=3/7",
            "4 r0 @3 finished succeeded COMPLETED",
            "5 r0 @3 finished succeeded COMPLETED",
            "6 r0 @3 finished succeeded COMPLETED",
            "7 r0 @3 finished succeeded COMPLETED",
        ]
    );
}

#[test]
fn array_tasks_are_children_and_the_array_ends_after_its_last_task() {
    let polls = capture("array");
    let reports = run(&polls);
    let t0 = polls[0].now;
    let got: Vec<String> = reports.iter().map(|r| line(r, t0)).collect();
    let parent = reports[0].bursar_id.clone();
    assert_eq!(got[0], "46_* r0 @0 queued", "{got:#?}");
    // Every task that ran: started once with the parent named, finished once, under `<parent>_<task>`.
    for t in [0, 1, 2, 3, 5] {
        let of: Vec<&Report> = reports.iter().filter(|r| r.key.to_string() == format!("46_{t}")).collect();
        assert_eq!(of.len(), 2, "task {t}: {got:#?}");
        assert!(matches!(&of[0].what, What::Started { parent: Some(p), gpus: Some(g), .. } if *p == parent && *g == 2));
        assert!(matches!(of[1].what, What::Finished { .. }));
        assert_eq!(of[0].bursar_id, format!("{parent}_{t}"));
    }
    // Task 1 was cancelled running; task 4 while pending (it never appears as a task).
    assert!(got.iter().any(|l| l == "46_1 r0 @1 finished cancelled CANCELLED"), "{got:#?}");
    assert!(!got.iter().any(|l| l.starts_with("46_4 ")));
    // The last task took the array's own JobID: its events name that JobID.
    let five = reports.iter().find(|r| r.key.to_string() == "46_5").unwrap();
    assert_eq!(five.slurm_id, 46);
    assert_eq!(got.last().unwrap(), "46_* r0 @7 finished cancelled array ended");
    assert_eq!(got.iter().filter(|l| l.starts_with("46_* ")).count(), 2);
}

#[test]
fn heterogeneous_components_are_each_reported_with_their_leader() {
    let reports = run(&capture("het"));
    let ids: BTreeSet<&str> = reports.iter().map(|r| r.bursar_id.as_str()).collect();
    assert_eq!(ids.len(), 2);
    for r in &reports {
        let (leader, offset) = r.het.unwrap();
        assert_eq!(leader, 51);
        assert_eq!(u64::from(offset), r.slurm_id - 51);
    }
    assert_eq!(reports.iter().filter(|r| matches!(r.what, What::Finished { .. })).count(), 2);
}

#[test]
fn preemption_and_node_failure_requeue_without_ending() {
    let got = lines(&["preempt", "nodefail"]);
    let of = |k: &str| got.iter().filter(|l| l.starts_with(&format!("{k} "))).cloned().collect::<Vec<_>>();
    assert_eq!(
        of("53"),
        [
            "53 r0 @0 queued",
            "53 r0 @-1 started gpus=8",
            // Preempted by the urgent partition (PreemptMode=REQUEUE): pending again with RestartCnt 1.
            "53 r0 @1 requeued",
            "53 r0 @1 waits 1 BeginTime",
            "53 r1 @5 started gpus=8",
            "53 r1 @10 finished cancelled CANCELLED",
        ]
    );
    assert_eq!(
        of("54"),
        [
            "54 r0 @0 queued",
            "54 r0 @-1 started gpus=8",
            // Its node went down: requeued, then cancelled while it waited (never ran again).
            "54 r0 @8 requeued",
            "54 r0 @8 waits 1 BeginTime",
            "54 r1 @10 finished cancelled CANCELLED",
        ]
    );
}

/// Per key: the events form `queued? (started (requeued|rerun)?)* finished?`, starts and ends alternate,
/// times never decrease within a key and never pass the poll that sent them.
fn well_formed(reports: &[Report], sent_at: &[i64]) {
    let mut by_key: BTreeMap<String, Vec<(&Report, i64)>> = BTreeMap::new();
    for (r, at) in reports.iter().zip(sent_at) {
        by_key.entry(r.key.to_string()).or_default().push((r, *at));
    }
    for (key, evs) in by_key {
        let mut running = false;
        let mut finished = false;
        let mut last_t = i64::MIN;
        for (r, sent) in &evs {
            assert!(r.at <= *sent, "{key}: {r:?} is in the future of its poll {sent}");
            // `job.queued` is dated by the poll that first saw the job, which may be after its start.
            if !matches!(r.what, What::Queued) {
                assert!(r.at >= last_t, "{key}: time goes back at {r:?} in {evs:#?}");
                last_t = r.at;
            }
            match &r.what {
                What::Queued | What::Moved => assert!(!running && !finished, "{key}: queued late"),
                What::Waits { .. } => assert!(!running && !finished, "{key}: a reason to wait while not waiting"),
                What::Started { .. } => {
                    assert!(!running && !finished, "{key}: started twice or after the end: {evs:#?}");
                    running = true;
                }
                What::Requeued => {
                    assert!(running, "{key}: requeued while not running");
                    running = false;
                }
                What::Rerun => {
                    assert!(finished, "{key}: rerun of a job not finished");
                    finished = false;
                }
                What::Finished { .. } | What::Replaced { .. } => {
                    assert!(!finished, "{key}: finished twice: {evs:#?}");
                    finished = true;
                    running = false;
                }
            }
        }
    }
}

const ALL: [&str; 15] = [
    "plain",
    "requeue",
    "rerun",
    "specialexit",
    "requeuehold",
    "release",
    "cancelled-pending",
    "failed",
    "timeout",
    "shapes",
    "array",
    "het",
    "preempt",
    "nodefail",
    "mig",
];

/// Every event id sent, with what it said; an id sent twice must say the same thing.
fn by_id(reports: &[Report]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in reports {
        let e = r.to_event("lab").to_json();
        if let Some(before) = out.insert(r.event_id("lab"), e.clone()) {
            assert_eq!(before, e, "id {} sent with two meanings", r.event_id("lab"));
        }
    }
    out
}

#[test]
fn a_restart_between_any_two_polls_loses_and_doubles_nothing() {
    for name in ALL {
        let polls = if name == "nodefail" { captures(&["preempt", "nodefail"]) } else { capture(name) };
        let straight = by_id(&run(&polls));
        for cut in 0..polls.len() {
            // Restart from the saved file: the state goes through its JSON.
            let mut state = WatchState::default();
            let mut sent = Vec::new();
            for (i, p) in polls.iter().enumerate() {
                if i == cut {
                    let text = serde_json::to_string(&state).unwrap();
                    state = serde_json::from_str(&text).unwrap();
                }
                sent.extend(poll(&mut state, p));
            }
            assert_eq!(by_id(&sent), straight, "{name}: restart before poll {cut}");
            // A crash after serve accepted poll `cut` but before the state was saved: that poll runs
            // again from the old state; what it resends has the same ids (dropped by serve).
            let mut state = WatchState::default();
            let mut sent = Vec::new();
            for (i, p) in polls.iter().enumerate() {
                if i == cut {
                    let mut lost = state.clone();
                    sent.extend(poll(&mut lost, p));
                }
                sent.extend(poll(&mut state, p));
            }
            assert_eq!(by_id(&sent), straight, "{name}: crash in poll {cut}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A slower watcher sees a subset of the polls (always the last one): whatever it misses, each
    /// job's story stays well formed, nothing is dated after the poll that sent it, and every job
    /// that ended in Slurm is finished exactly once.
    #[test]
    fn any_subset_of_polls_tells_a_well_formed_story(
        scenario in 0..ALL.len(),
        keep in proptest::collection::vec(any::<bool>(), 40),
    ) {
        let name = ALL[scenario];
        let polls = if name == "nodefail" { captures(&["preempt", "nodefail"]) } else { capture(name) };
        let last = polls.len() - 1;
        let chosen: Vec<&Poll> = polls.iter().enumerate().filter(|(i, _)| *i == last || keep[*i % keep.len()]).map(|(_, p)| p).collect();
        let mut state = WatchState::default();
        let mut reports = Vec::new();
        let mut sent_at = Vec::new();
        for p in &chosen {
            for r in poll(&mut state, p) {
                reports.push(r);
                sent_at.push(p.now);
            }
        }
        well_formed(&reports, &sent_at);
        let final_poll = &polls[last];
        for row in &final_poll.rows {
            if matches!(row.phase(), bursar_slurm::queue::Phase::Ended(_)) {
                let key = row.key().to_string();
                let ends = reports.iter().filter(|r| r.key.to_string() == key && matches!(r.what, What::Finished { .. })).count();
                prop_assert!(ends >= 1, "{name}: {key} ended in Slurm, never finished in bursar");
            }
        }
    }
}
