//! `bursar report` end to end on a small stream whose every number is computed by hand below: the real
//! binary, a real policy directory, a real SQLite audit log written by `bursar eval --audit`.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure stops the test with its message")]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const H: f64 = 3_600_000.0;

const POLICIES: &str = r#"
[[policy]]
id = "reclaim/idle"
description = "Idle under 10% for 100 hours."
kind = "reclaim"
[policy.idle]
below = 0.10
window = "100h"
grace = "1h"

[[policy]]
id = "reclaim/max-runtime"
description = "At most a week."
kind = "reclaim"
max_runtime = "7d"

[[policy]]
id = "quota/month"
description = "Monthly budgets."
kind = "quota"
gpu_hours = 100_000
limits = { p1 = 500 }
on_exhaust = "deny"

[[policy]]
id = "quota/dry"
description = "A tight budget, tried out in dry run."
kind = "quota"
mode = "dry_run"
gpu_hours = 10
on_exhaust = "deny"
"#;

/// Hand-computed (idle threshold 0.10 from the policy above), GPU-hours:
/// - j1 p1/alice/team a, 2 GPUs, start 01:00 (queued 1 h): samples 02:00 0.9, 04:00 0.05, 05:00 0.8,
///   06:00 0.02, succeeded 09:00. Productive [01,04)+[05,06) = 4 h × 2 = 8; idle [04,05) = 2;
///   held [06,09) = 6; nominal 16.
/// - j2 p2/bob/team b, 4 GPUs, cfgB, start 00:30 (queued 0.5 h), sample 01:00 0.9, failed 02:30: failure 8.
/// - j3 p2 cfgB submitted after j2 failed (a rerun), 4 GPUs 03:00–05:00, cancelled: failure 8.
/// - j4 p2 cfgB, still a rerun (cancelled does not clear the failure), 4 GPUs 06:00–08:00, no sample,
///   succeeded: unmeasured 8 (a successful rerun keeps its split; without a sample nothing says
///   whether its hours were productive).
/// - j5 p1/carol/team a, 1 GPU, 2026-11-30 22:00 to 2026-12-01 02:00, sample 23:00 0.5: productive,
///   2 in November and 2 in December.
/// - j6 p1/alice, 1 GPU, started 2026-11-10 00:00, no sample, finished 11-20 but reclaimed by the
///   7-day max runtime at 11-17 00:00: nominal 168, unmeasured 168. The reclaim kept 72 GPU-hours from
///   running (its 240-hour reservation ran to 11-20 00:00): prevented 72.
///
/// November by project: p1 nominal 186 (productive 10, idle 2, held 6, unmeasured 168; effective
/// 10 / 18); p2 nominal 24 (failure 16, unmeasured 8; effective 0 / 16).
const EVENTS: &str = r#"{"id":"s1","time":"2026-11-02T00:00:00Z","type":"job.submitted","job":{"id":"j1","project":"p1","user":"alice","gpus":2,"requested_hours":10,"config":"cfgA","tags":{"team":"a"}}}
{"id":"s2","time":"2026-11-02T00:00:00Z","type":"job.submitted","job":{"id":"j2","project":"p2","user":"bob","gpus":4,"requested_hours":3,"config":"cfgB","tags":{"team":"b"}}}
{"id":"t2","time":"2026-11-02T00:30:00Z","type":"job.started","job_id":"j2"}
{"id":"t1","time":"2026-11-02T01:00:00Z","type":"job.started","job_id":"j1"}
{"id":"u20","time":"2026-11-02T01:00:00Z","type":"job.sample","job_id":"j2","gpu_util":0.9}
{"id":"u10","time":"2026-11-02T02:00:00Z","type":"job.sample","job_id":"j1","gpu_util":0.9}
{"id":"f2","time":"2026-11-02T02:30:00Z","type":"job.finished","job_id":"j2","status":"failed"}
{"id":"s3","time":"2026-11-02T03:00:00Z","type":"job.submitted","job":{"id":"j3","project":"p2","user":"bob","gpus":4,"requested_hours":3,"config":"cfgB","tags":{"team":"b"}}}
{"id":"t3","time":"2026-11-02T03:00:00Z","type":"job.started","job_id":"j3"}
{"id":"u11","time":"2026-11-02T04:00:00Z","type":"job.sample","job_id":"j1","gpu_util":0.05}
{"id":"u30","time":"2026-11-02T04:00:00Z","type":"job.sample","job_id":"j3","gpu_util":0.5}
{"id":"u12","time":"2026-11-02T05:00:00Z","type":"job.sample","job_id":"j1","gpu_util":0.8}
{"id":"f3","time":"2026-11-02T05:00:00Z","type":"job.finished","job_id":"j3","status":"cancelled"}
{"id":"u13","time":"2026-11-02T06:00:00Z","type":"job.sample","job_id":"j1","gpu_util":0.02}
{"id":"s4","time":"2026-11-02T06:00:00Z","type":"job.submitted","job":{"id":"j4","project":"p2","user":"bob","gpus":4,"requested_hours":3,"config":"cfgB","tags":{"team":"b"}}}
{"id":"t4","time":"2026-11-02T06:00:00Z","type":"job.started","job_id":"j4"}
{"id":"f4","time":"2026-11-02T08:00:00Z","type":"job.finished","job_id":"j4","status":"succeeded"}
{"id":"f1","time":"2026-11-02T09:00:00Z","type":"job.finished","job_id":"j1","status":"succeeded"}
{"id":"b1","time":"2026-11-03T00:00:00Z","type":"billing.charge","project":"p1","job_id":"j1","gpu_hours":16.0,"amount":240.0,"currency":"CNY","mode":"on_demand"}
{"id":"b2","time":"2026-11-03T00:00:00Z","type":"billing.charge","project":"p2","job_id":"j2","gpu_hours":8.0,"amount":120.0,"currency":"CNY","mode":"on_demand"}
{"id":"s6","time":"2026-11-10T00:00:00Z","type":"job.submitted","job":{"id":"j6","project":"p1","user":"alice","gpus":1,"requested_hours":240}}
{"id":"t6","time":"2026-11-10T00:00:00Z","type":"job.started","job_id":"j6"}
{"id":"f6","time":"2026-11-20T00:00:00Z","type":"job.finished","job_id":"j6","status":"succeeded"}
{"id":"s5","time":"2026-11-30T22:00:00Z","type":"job.submitted","job":{"id":"j5","project":"p1","user":"carol","gpus":1,"requested_hours":4,"tags":{"team":"a"}}}
{"id":"t5","time":"2026-11-30T22:00:00Z","type":"job.started","job_id":"j5"}
{"id":"u50","time":"2026-11-30T23:00:00Z","type":"job.sample","job_id":"j5","gpu_util":0.5}
{"id":"f5","time":"2026-12-01T02:00:00Z","type":"job.finished","job_id":"j5","status":"succeeded"}
"#;

struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("bursar-report-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("policies")).unwrap();
        std::fs::write(dir.join("policies/p.toml"), POLICIES).unwrap();
        std::fs::write(dir.join("events.jsonl"), EVENTS).unwrap();
        Fixture { dir }
    }

    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).to_str().unwrap().to_owned()
    }

    /// Runs eval with --audit over `events` (a file in the fixture); returns the decisions printed.
    fn eval(&self, events: &str, db: &str) -> Vec<Value> {
        let out = run(&[
            "eval",
            "--policies",
            &self.path("policies"),
            "--events",
            &self.path(events),
            "--audit",
            &self.path(db),
        ]);
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn report(&self, db: &str, extra: &[&str]) -> Value {
        let db = self.path(db);
        let mut args = vec!["report", "--db", db.as_str(), "--format", "json"];
        args.extend_from_slice(extra);
        serde_json::from_slice(&run(&args).stdout).unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_bursar")
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(out.status.success(), "bursar {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn fail(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "bursar {args:?} should fail with 2");
    String::from_utf8(out.stderr).unwrap()
}

fn group<'a>(r: &'a Value, key: &str) -> &'a Value {
    r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == key)
        .unwrap_or_else(|| panic!("no group `{key}` in {r}"))
}

/// The exact split of a group, in GPU-hours (exact GPU-ms / 3.6e6): nominal, productive, idle,
/// failure, held, unmeasured.
fn split(g: &Value) -> [f64; 6] {
    let s = &g["exact_gpu_ms"];
    let f = |k: &str| s[k].as_i64().unwrap() as f64 / H;
    [f("nominal"), f("productive"), f("idle"), f("failure"), f("held"), f("unmeasured")]
}

fn adds_up(r: &Value) {
    for g in r["groups"].as_array().unwrap().iter().chain(std::iter::once(&r["total"])) {
        let s = &g["exact_gpu_ms"];
        let v = |k: &str| s[k].as_i64().unwrap();
        assert_eq!(
            v("productive") + v("idle") + v("failure") + v("held") + v("unmeasured"),
            v("nominal"),
            "{}",
            g["key"]
        );
    }
}

/// Sum of `gpu_hours` of decisions of `kind` with the given dry-run flag, one per job (the largest).
fn decided(decisions: &[Value], kind: &str, dry: bool) -> f64 {
    let mut per_job = std::collections::BTreeMap::<String, f64>::new();
    for d in decisions {
        if d["decision"] == kind
            && d["dry_run"].as_bool().unwrap_or(false) == dry
            && let Some(gh) = d["gpu_hours"].as_f64()
        {
            let e = per_job.entry(d["job_id"].as_str().unwrap_or("").to_owned()).or_insert(0.0);
            *e = e.max(gh);
        }
    }
    per_job.values().sum()
}

#[test]
fn november_by_project_matches_the_hand_computed_split() {
    let fx = Fixture::new("project");
    let decisions = fx.eval("events.jsonl", "a.db");
    let r = fx.report("a.db", &["--period", "2026-11"]);
    adds_up(&r);
    assert_eq!(r["idle_threshold"], 0.10, "the threshold comes from the enforced idle policy");
    assert_eq!(split(group(&r, "p1")), [186.0, 10.0, 2.0, 0.0, 6.0, 168.0]);
    assert_eq!(split(group(&r, "p2")), [24.0, 0.0, 0.0, 16.0, 0.0, 8.0]);
    assert_eq!(split(&r["total"]), [210.0, 10.0, 2.0, 16.0, 6.0, 176.0]);
    // Effective over the measured hours only (issue 45: a job without samples was 100 % effective).
    assert_eq!(group(&r, "p1")["effective_ratio"].as_f64(), Some(10.0 / 18.0));
    assert_eq!(group(&r, "p2")["effective_ratio"].as_f64(), Some(0.0));
    assert_eq!(r["total"]["effective_ratio"].as_f64(), Some(10.0 / 34.0));
    assert_eq!(group(&r, "p2")["jobs"], 3);
    // Queue waits: j1 1 h, j6 0, j5 0 (p1); j2 0.5 h, j3 0, j4 0 (p2).
    assert_eq!(group(&r, "p1")["queue_wait_hours"], 1.0);
    assert_eq!(group(&r, "p2")["queue_wait_hours"], 0.5);
    assert_eq!(group(&r, "p1")["charged"][0]["amount"], 240.0);
    assert_eq!(group(&r, "p2")["charged"][0]["currency"], "CNY");
    // What the report says policies did equals what eval printed.
    let prevented = &r["total"]["prevented"];
    assert_eq!(prevented["reclaimed"].as_f64().unwrap(), decided(&decisions, "reclaim", false));
    // j6's max-runtime reclaim at 11-17 00:00 ended a job whose reservation ran to 11-20 00:00.
    assert_eq!(prevented["reclaimed"].as_f64(), Some(72.0));
    assert_eq!((prevented["denied"].as_f64(), prevented["deferred"].as_f64()), (Some(0.0), Some(0.0)));
    let dry = &r["total"]["dry_run_would_save"];
    assert_eq!(dry["denied"].as_f64().unwrap(), decided(&decisions, "deny", true));
    assert!(dry["denied"].as_f64().unwrap() > 0.0, "the dry-run quota denied something");
    // The largest leak of p2 is failure, of p1 held.
    assert_eq!(group(&r, "p2")["top_leaks"][0]["leak"], "failure");
    assert_eq!(group(&r, "p1")["top_leaks"][0]["leak"], "held");
    // Burn-down: p1 has a 500 GPU-hour budget, and its use accumulates to 186 over the month.
    let b = r["burndown"].as_array().unwrap().iter().find(|b| b["project"] == "p1").unwrap();
    assert_eq!(b["budget_gpu_hours"], 500.0);
    assert_eq!(b["cumulative_gpu_hours"].as_array().unwrap().len(), 30);
    assert_eq!(b["cumulative_gpu_hours"][29], 186.0);

    let dec = fx.report("a.db", &["--period", "2026-12"]);
    assert_eq!(split(group(&dec, "p1")), [2.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
    let all = fx.report("a.db", &["--period", "all"]);
    assert_eq!(split(&all["total"]), [212.0, 12.0, 2.0, 16.0, 6.0, 176.0]);
    // Over several months the budget is each month's: the count starts again in December.
    let b = all["burndown"].as_array().unwrap().iter().find(|b| b["project"] == "p1").unwrap();
    assert_eq!(b["budget_gpu_hours"], 500.0);
    let c = b["cumulative_gpu_hours"].as_array().unwrap();
    assert_eq!((c[c.len() - 2].as_f64(), c.last().and_then(|v| v.as_f64())), (Some(186.0), Some(2.0)), "{c:?}");
    // Without --period, the report opens on the log's newest month (December here), budget drawn.
    let newest = fx.report("a.db", &[]);
    assert_eq!(split(group(&newest, "p1")), [2.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(newest["period"], "2026-12");
}

#[test]
fn by_user_and_by_tag() {
    let fx = Fixture::new("by");
    fx.eval("events.jsonl", "a.db");
    let r = fx.report("a.db", &["--period", "2026-11", "--by", "user"]);
    adds_up(&r);
    assert_eq!(r["by"], "user");
    assert_eq!(split(group(&r, "alice")), [184.0, 8.0, 2.0, 0.0, 6.0, 168.0]);
    assert_eq!(split(group(&r, "bob"))[0], 24.0);
    assert_eq!(split(group(&r, "carol"))[0], 2.0);
    let t = fx.report("a.db", &["--period", "2026-11", "--by", "tag:team"]);
    adds_up(&t);
    assert_eq!(split(group(&t, "a"))[0], 18.0);
    assert_eq!(split(group(&t, "b"))[0], 24.0);
    assert_eq!(split(group(&t, "(none)"))[0], 168.0, "j6 has no team tag");
    // j6 alone, without a sample: not measured, not effective (issue 45).
    assert_eq!(group(&t, "(none)")["effective_ratio"], Value::Null);
}

#[test]
fn facts_caught_up_in_pieces_equal_facts_built_at_once() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let fx = Fixture::new("incremental");
    fx.eval("events.jsonl", "whole.db");
    let lines: Vec<&str> = EVENTS.lines().collect();
    // One engine writes the log (the lifecycle is the engine's: two `eval` runs would be two engines
    // that do not know each other's jobs); the facts catch up while it is in the middle of the
    // stream — after j3's admission, in the middle of j1's samples, with j6 and j5 not yet submitted
    // — and again at the end.
    let mut eval = Command::new(bin())
        .args(["eval", "--policies", &fx.path("policies"), "--events", "-", "--audit", &fx.path("parts.db")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = eval.stdin.take().unwrap();
    stdin.write_all((lines[..12].join("\n") + "\n").as_bytes()).unwrap();
    stdin.flush().unwrap();
    let mut stdout = BufReader::new(eval.stdout.take().unwrap());
    let mut line = String::new();
    // A decision is printed once it is committed: after s3's admission, the first part is in the log.
    while !line.contains(r#""event_id":"s3""#) {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "eval ended before deciding s3");
    }
    let mid = fx.report("parts.db", &["--period", "2026-11"]);
    adds_up(&mid);
    assert!(split(&mid["total"])[0] > 0.0, "the facts caught up with part of the stream");
    stdin.write_all((lines[12..].join("\n") + "\n").as_bytes()).unwrap();
    drop(stdin);
    std::io::copy(&mut stdout, &mut std::io::sink()).unwrap();
    assert!(eval.wait().unwrap().success());
    let whole = fx.report("whole.db", &["--period", "2026-11"]);
    let parts = fx.report("parts.db", &["--period", "2026-11"]);
    assert_eq!(whole["groups"], parts["groups"]);
    assert_eq!(whole["daily"], parts["daily"]);
    // A rebuild from the log gives the same facts again.
    let rebuilt = fx.report("parts.db", &["--period", "2026-11", "--rebuild"]);
    assert_eq!(whole["groups"], rebuilt["groups"]);
}

#[test]
fn table_csv_and_prices() {
    let fx = Fixture::new("formats");
    fx.eval("events.jsonl", "a.db");
    let db = fx.path("a.db");
    let table = String::from_utf8(run(&["report", "--db", &db, "--period", "2026-11"]).stdout).unwrap();
    assert!(table.contains("GPU-hours by project for 2026-11 (2026-11-01 to 2026-11-30)"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("p1 ") && l.contains("186.0") && l.contains("168.0") && l.contains("55.6%")),
        "{table}"
    );
    let by_tag =
        String::from_utf8(run(&["report", "--db", &db, "--period", "2026-11", "--by", "tag:team"]).stdout).unwrap();
    assert!(by_tag.lines().any(|l| l.starts_with("(none)") && l.contains("not measured")), "{by_tag}");
    assert!(table.lines().any(|l| l.starts_with("(total)") && l.contains("210.0")), "{table}");
    let csv =
        String::from_utf8(run(&["report", "--db", &db, "--period", "2026-11", "--format", "csv"]).stdout).unwrap();
    let rows: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 4, "header, p1, p2, total: {csv}");
    assert!(rows[0].starts_with("period,group_by,key,jobs,nominal_gpu_h"));
    assert!(rows[1].starts_with("2026-11,project,p1,3,186,"), "{}", rows[1]);

    // Prices: on demand 10/GPU-h, block 100/GPU-month, per task 1 + 9/GPU-h.
    std::fs::write(
        fx.dir.join("prices.toml"),
        "currency = \"CNY\"\n[on_demand]\nper_gpu_hour = 10.0\n[reserved]\nper_gpu_month = 100.0\n[per_task]\nper_task = 1.0\nper_gpu_hour = 9.0\n",
    )
    .unwrap();
    let r = fx.report("a.db", &["--period", "2026-11", "--prices", &fx.path("prices.toml")]);
    let b = &r["billing"];
    assert_eq!(b["months"], 1.0);
    let p2 = b["projects"].as_array().unwrap().iter().find(|p| p["project"] == "p2").unwrap();
    // p2 used 24 GPU-hours: on demand 240; per task 3 jobs → 3 + 216 = 219; a block of B GPUs costs
    // 100 B + 10 × (use above B): 4 GPUs for 6 hours peak, so B = 0 (240) beats B = 1 (100 + 180).
    assert_eq!(p2["on_demand"], 240.0);
    assert_eq!(p2["per_task"], 219.0);
    assert_eq!(p2["reserved"]["block_gpus"], 0);
    assert_eq!(p2["cheapest"], "per_task");
    assert_eq!(p2["saving_vs_next"], 21.0);
    // p1's curve: 1 GPU for 168 h (j6) + 2 h (j5), 2 GPUs for 8 h (j1): 186 GPU-hours, 1860 on demand.
    // B = 1: 100 + 10 × 8 (j1's second GPU) = 180; B = 2: 200; B = 0: 1860. Per task: 3 + 9 × 186 = 1677.
    let p1 = b["projects"].as_array().unwrap().iter().find(|p| p["project"] == "p1").unwrap();
    assert_eq!(p1["on_demand"], 1860.0);
    assert_eq!(p1["reserved"]["block_gpus"], 1);
    assert_eq!(p1["reserved"]["cost"], 180.0);
    assert_eq!(p1["per_task"], 1677.0);
    assert_eq!(p1["cheapest"], "reserved");
}

#[test]
fn errors_say_what_to_do() {
    let fx = Fixture::new("errors");
    let missing = fx.path("nope.db");
    assert!(fail(&["report", "--db", &missing]).contains("does not exist"));
    fx.eval("events.jsonl", "a.db");
    let db = fx.path("a.db");
    assert!(fail(&["report", "--db", &db, "--period", "november"]).contains("`--period november` is not a period"));
    assert!(fail(&["report", "--db", &db, "--by", "team"]).contains("help: use `project`, `user` or `tag:KEY`"));
    std::fs::write(fx.dir.join("bad.toml"), "[on_demand]\nper_gpu_hour = \"ten\"\n").unwrap();
    let e = fail(&["report", "--db", &db, "--prices", &fx.path("bad.toml")]);
    assert!(e.contains("bad.toml") && e.contains("per_gpu_hour"), "{e}");
    std::fs::write(fx.dir.join("plain.db"), "").unwrap();
    assert!(fail(&["report", "--db", &fx.path("plain.db")]).contains("not a bursar audit log"));
}

/// With `reclaim/finished` (`on_finish = true`, as in `policies/reclaim.toml`) a failed job is
/// reclaimed on the same `job.finished` event. Its hours are still lost to failure, and a rerun of
/// its configuration is still a rerun: the lifecycle must say the job *finished failed*, and that the
/// reclaim followed.
#[test]
fn a_failed_job_released_by_the_finish_reclaim_is_failure() {
    let fx = Fixture::new("on-finish");
    std::fs::write(
        fx.dir.join("policies/p.toml"),
        "[[policy]]\nid = \"reclaim/finished\"\ndescription = \"Release at once.\"\nkind = \"reclaim\"\non_finish = true\n",
    )
    .unwrap();
    std::fs::write(
        fx.dir.join("events.jsonl"),
        r#"{"id":"s1","time":"2026-11-02T00:00:00Z","type":"job.submitted","job":{"id":"k1","project":"p","user":"u","gpus":2,"requested_hours":4,"config":"c"}}
{"id":"t1","time":"2026-11-02T01:00:00Z","type":"job.started","job_id":"k1"}
{"id":"u1","time":"2026-11-02T02:00:00Z","type":"job.sample","job_id":"k1","gpu_util":0.9}
{"id":"f1","time":"2026-11-02T03:00:00Z","type":"job.finished","job_id":"k1","status":"failed"}
{"id":"s2","time":"2026-11-02T04:00:00Z","type":"job.submitted","job":{"id":"k2","project":"p","user":"u","gpus":1,"requested_hours":4,"config":"c"}}
{"id":"t2","time":"2026-11-02T04:00:00Z","type":"job.started","job_id":"k2"}
{"id":"f2","time":"2026-11-02T05:00:00Z","type":"job.finished","job_id":"k2","status":"cancelled"}
"#,
    )
    .unwrap();
    let decisions = fx.eval("events.jsonl", "a.db");
    assert!(decisions.iter().any(|d| d["decision"] == "reclaim" && d["job_id"] == "k1"), "the finish reclaim fired");
    let r = fx.report("a.db", &["--period", "2026-11"]);
    // k1: 2 GPUs × 2 h, failed; k2: a rerun of the failed configuration that did not succeed, 1 h.
    assert_eq!(split(group(&r, "p")), [5.0, 0.0, 0.0, 5.0, 0.0, 0.0]);
    // The finish reclaims name the unused reservations (k1: 2 h of its 4 left × 2 GPUs at 03:00; k2:
    // 3 h × 1 GPU at 05:00); the jobs ended on their own, so nothing was prevented (issue 45: 161.9
    // "prevented" for a job that ran a minute).
    let named = decided(&decisions, "reclaim", false);
    assert_eq!(named, 4.0 + 3.0, "{decisions:?}");
    assert_eq!(r["total"]["prevented"]["reclaimed"].as_f64(), Some(0.0));
}

/// Issue 45: before any job ended or was sampled, the report said "no enforced monthly quota limits
/// these projects". The budget line is the policies' from the first event on.
#[test]
fn the_budget_line_is_the_policies_from_the_first_event() {
    let fx = Fixture::new("first-event");
    std::fs::write(fx.dir.join("first.jsonl"), EVENTS.lines().take(4).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    fx.eval("first.jsonl", "a.db");
    let r = fx.report("a.db", &["--period", "2026-11"]);
    let b = r["burndown"].as_array().unwrap().iter().find(|b| b["project"] == "p1").unwrap_or_else(|| panic!("{r}"));
    assert_eq!(b["budget_gpu_hours"], 500.0, "{r}");
    let p2 = r["burndown"].as_array().unwrap().iter().find(|b| b["project"] == "p2").unwrap_or_else(|| panic!("{r}"));
    assert_eq!(p2["budget_gpu_hours"], 100_000.0, "{r}");
    let html =
        String::from_utf8(run(&["report", "--db", &fx.path("a.db"), "--period", "2026-11", "--format", "html"]).stdout)
            .unwrap();
    assert!(!html.contains("no enforced monthly quota"), "the page says no quota limits the projects");
    assert!(html.contains("p1: budget left of 500 GPU-h"), "no budget line for p1");
}
