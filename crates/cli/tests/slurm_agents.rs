//! `bursar slurm enforce` and `bursar slurm watch` against the real `bursar serve` binary, on a machine
//! without Slurm: the paths that need no cluster. A reclaim whose Slurm command cannot run is retried,
//! then recorded in the audit log as failed with the reason; the cursor is persisted so a second run
//! does nothing twice; `watch` reports an unusable squeue instead of sending anything. With Slurm's
//! commands stood in for by scripts that print what Slurm 22.05 printed on the lab
//! (crates/slurm/tests/data), the watcher reports a job's runs from them, and the enforcer records a
//! `scancel` that exits 0 without cancelling as failed. The paths that need a cluster are tested end to
//! end by integrations/slurm/e2e.sh and e2e-runs.sh.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed unwrap is the test failing, with its message")]

use crate::serve_support::*;
use bursar_audit::AuditLog;
use serde_json::Value;

const RECLAIM: &str = r#"[[policy]]
id = "reclaim/finished"
description = "release GPUs when the job ends"
kind = "reclaim"
on_finish = true
"#;

fn enforcement_records(s: &Scratch) -> Vec<Value> {
    let log = AuditLog::open_read(s.audit()).unwrap();
    log.events_since(0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event_id.starts_with("enforce-"))
        .map(|e| serde_json::from_str(&e.raw).unwrap())
        .collect()
}

#[test]
fn a_reclaim_that_cannot_be_executed_is_recorded_as_failed_once() {
    let s = Scratch::new("slurm-enforce");
    s.write_policy("reclaim.toml", RECLAIM);
    let server = Server::start(&s, &[]);
    // The hook's submission (event id `sub-<job>`): its allow asks nothing of the enforcer.
    assert_eq!(server.post("/v1/admit", &submit("sub-lab-1", "lab-1", "nlp", 2, 1.0)).status, 200);
    let r = server.post(
        "/v1/events",
        &format!(
            "{}\n{}\n",
            job_event("slurm-lab-7-started", "job.started", "lab-1", r#","slurm_job_id":"7""#),
            job_event("slurm-lab-7-finished", "job.finished", "lab-1", r#","status":"succeeded","slurm_job_id":"7""#)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let reclaim = server
        .decisions(0)
        .into_iter()
        .find(|d| d["decision"] == "reclaim")
        .unwrap_or_else(|| panic!("no reclaim decision; log:\n{}", server.log_text()));
    let state = s.0.join("enforce.json");
    let addr = server.addr.to_string();
    let args = [
        "slurm",
        "enforce",
        "--once",
        "--server",
        &addr,
        "--cluster",
        "lab",
        "--state",
        state.to_str().unwrap(),
        "--squeue",
        "/nonexistent/squeue",
        "--max-attempts",
        "2",
        "--retry-delay",
        "10ms",
    ];
    let out = bursar(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 actions recorded (0 recorded before)"), "{stderr}");

    let records = enforcement_records(&s);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    // An enforcement is an action record of its own type (it used to ride on a `clock.tick` with an
    // `enforcement` field, which every `clock.tick` rule then saw).
    assert_eq!(r["type"], "action.failed");
    assert_eq!(r["id"], format!("enforce-{}", reclaim["decision_id"].as_str().unwrap()));
    assert_eq!(r["job_id"], "lab-1");
    assert_eq!(r["decision_id"], reclaim["decision_id"]);
    let e = r;
    assert_eq!(e["decision"], "reclaim");
    assert_eq!(e["action"], "scancel");
    assert_eq!(e["attempts"], 2);
    assert_eq!(e["decision_seq"], reclaim["seq"]);
    let detail = e["detail"].as_str().unwrap();
    assert!(detail.contains("gave up after 2 attempts") && detail.contains("/nonexistent/squeue"), "{detail}");

    // The cursor is past the reclaim: a second run reads only the alert the failure raised (issue 55:
    // the job still runs and counts again, `bursar/reclaim-failed`) and records nothing.
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert!(saved["cursor"].as_u64().unwrap() >= reclaim["seq"].as_u64().unwrap(), "{saved}");
    let again = bursar(&args);
    assert!(again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("1 decisions read, 0 actions recorded (0 recorded before)"), "{said}");
    assert_eq!(enforcement_records(&s).len(), 1);

    // A lost state file means the decision is handled again: the record keeps its id, serve drops it.
    std::fs::remove_file(&state).unwrap();
    let redo = bursar(&args);
    assert!(redo.status.success());
    let stderr = String::from_utf8_lossy(&redo.stderr);
    assert!(stderr.contains("0 actions recorded (1 recorded before)"), "{stderr}");
    assert_eq!(enforcement_records(&s).len(), 1);
}

#[test]
fn watch_reports_an_unusable_squeue_and_sends_nothing() {
    let s = Scratch::new("slurm-watch");
    let server = Server::start(&s, &[]);
    let state = s.0.join("watch.json");
    let addr = server.addr.to_string();
    let out = bursar(&[
        "slurm",
        "watch",
        "--once",
        "--server",
        &addr,
        "--state",
        state.to_str().unwrap(),
        "--squeue",
        "/nonexistent/squeue",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/squeue -h --states=all -O"), "{stderr}");
    assert!(!state.exists(), "nothing was sent, so nothing is remembered");
    assert!(server.decisions(0).is_empty());
}

/// Stand-ins for squeue, scontrol and scancel: they print what is in `dir` (`rows`: `squeue -O` lines;
/// `record-<id>`: a job's `scontrol show job -d -o`) and log what they were asked to do.
fn fake_slurm(dir: &std::path::Path) -> [String; 3] {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.display();
    let scripts = [
        (
            "squeue",
            format!(
                "#!/bin/sh\nj=\nwhile [ $# -gt 0 ]; do [ \"$1\" = -j ] && j=$2; shift; done\n\
                 if [ -n \"$j\" ]; then grep \"^$j|\" '{d}/rows'; else cat '{d}/rows'; fi\n"
            ),
        ),
        (
            "scontrol",
            format!(
                "#!/bin/sh\nif [ \"$1\" = show ]; then eval id=\\${{$#}}; cat \"{d}/record-$id\" 2>/dev/null \
                 || {{ echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1; }}; \
                 else echo \"$*\" >> '{d}/scontrol.log'; fi\n"
            ),
        ),
        // 22.05's scancel exits 0 for an id it does not cancel.
        ("scancel", format!("#!/bin/sh\necho \"$*\" >> '{d}/scancel.log'\nexit 0\n")),
    ];
    scripts.map(|(name, text)| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    })
}

/// The polls of a capture (crates/slurm/tests/data/seq/NAME.txt): rows, and each record by id.
fn polls(name: &str) -> Vec<(String, Vec<(String, String)>)> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../slurm/tests/data/seq/{name}.txt"));
    let text = std::fs::read_to_string(path).unwrap();
    text.split("### poll ")
        .skip(1)
        .map(|block| {
            let rest = block.split_once('\n').unwrap().1;
            let mut parts = rest.split("### scontrol ");
            let rows = parts.next().unwrap().to_owned();
            let records = parts.map(|p| {
                let (id, out) = p.split_once('\n').unwrap();
                (id.trim().to_owned(), out.to_owned())
            });
            (rows, records.collect())
        })
        .collect()
}

#[test]
fn watch_reports_a_jobs_runs_from_what_slurm_printed() {
    let s = Scratch::new("slurm-watch-runs");
    s.write_policy(
        "quota.toml",
        "[[policy]]\nid = \"quota/q\"\ndescription = \"d\"\nkind = \"quota\"\nmax_gpus = 64\n",
    );
    let server = Server::start(&s, &[]);
    // The job of the lab's `plain` capture: admitted by the hook as lab-efb0eca92c06, then pending,
    // running on 2 GPUs, completed.
    let job = "lab-efb0eca92c06";
    assert_eq!(server.post("/v1/admit", &submit(&format!("sub-{job}"), job, "nlp", 2, 1.0)).status, 200);
    let [squeue, scontrol, scancel] = fake_slurm(&s.0);
    let state = s.0.join("watch.json");
    let addr = server.addr.to_string();
    let watch = || {
        bursar(&[
            "slurm",
            "watch",
            "--once",
            "--server",
            &addr,
            "--cluster",
            "lab",
            "--state",
            state.to_str().unwrap(),
            "--squeue",
            &squeue,
            "--scontrol",
            &scontrol,
            "--scancel",
            &scancel,
        ])
    };
    for (rows, records) in polls("plain") {
        std::fs::write(s.0.join("rows"), rows).unwrap();
        for (id, out) in records {
            std::fs::write(s.0.join(format!("record-{id}")), out).unwrap();
        }
        let out = watch();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let log = AuditLog::open_read(s.audit()).unwrap();
    let events: Vec<Value> = log
        .events_since(0, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.job.as_deref() == Some(job))
        .map(|e| serde_json::from_str(&e.raw).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["job.submitted", "job.queued", "job.started", "job.finished"], "{events:#?}");
    assert_eq!(events[2]["gpus"], 2, "the GPUs Slurm allocated (JOB_GRES)");
    assert_eq!(events[2]["slurm_job_id"], "33");
    assert_eq!(events[3]["status"], "succeeded");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["version"], 2);
    // The watcher forgot everything: the same poll resends the same ids, which serve drops.
    std::fs::remove_file(&state).unwrap();
    let again = watch();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("3 events sent (3 already known)"), "{stderr}");
}

#[test]
fn a_scancel_that_exits_0_without_cancelling_is_recorded_as_failed() {
    let s = Scratch::new("slurm-enforce-refused");
    s.write_policy(
        "reclaim.toml",
        "[[policy]]\nid = \"reclaim/max\"\ndescription = \"d\"\nkind = \"reclaim\"\nmax_runtime = \"1s\"\n",
    );
    let server = Server::start(&s, &["--tick", "200ms"]);
    assert_eq!(server.post("/v1/admit", &submit("sub-lab-2", "lab-2", "nlp", 1, 1.0)).status, 200);
    let r =
        server.post("/v1/events", &job_event("slurm-lab-7-started", "job.started", "lab-2", r#","slurm_job_id":"7""#));
    assert_eq!(r.status, 200, "{}", r.text());
    server.wait_for(10, "a reclaim", || server.decisions(0).into_iter().find(|d| d["decision"] == "reclaim"));
    let [squeue, scontrol, scancel] = fake_slurm(&s.0);
    // Slurm keeps showing job 7 running, whatever scancel said.
    std::fs::write(
        s.0.join("rows"),
        "7|7|N/A|N/A|N/A|RUNNING|0|1796417597|1796418197|1|cpu=1,mem=1000M,node=1,billing=1|n1|debug|0|root|None|\n",
    )
    .unwrap();
    let watch_state = s.0.join("watch.json");
    std::fs::write(&watch_state, r#"{"version":2,"jobs":{"7":{"b":"lab-2","k":"job","j":7,"l":"running"}}}"#).unwrap();
    let state = s.0.join("enforce.json");
    let addr = server.addr.to_string();
    let out = bursar(&[
        "slurm",
        "enforce",
        "--once",
        "--server",
        &addr,
        "--cluster",
        "lab",
        "--state",
        state.to_str().unwrap(),
        "--watch-state",
        watch_state.to_str().unwrap(),
        "--squeue",
        &squeue,
        "--scontrol",
        &scontrol,
        "--scancel",
        &scancel,
        "--max-attempts",
        "2",
        "--retry-delay",
        "10ms",
        "--verify-within",
        "500ms",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records = enforcement_records(&s);
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["type"], "action.failed");
    let detail = records[0]["detail"].as_str().unwrap();
    assert!(detail.contains("scancel 7 exited 0, but Slurm job 7 is still RUNNING"), "{detail}");
    assert_eq!(records[0]["attempts"], 2);
    assert_eq!(std::fs::read_to_string(s.0.join("scancel.log")).unwrap(), "7\n7\n", "cancelled exactly job 7, twice");
}
