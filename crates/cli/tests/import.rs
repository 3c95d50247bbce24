//! `bursar import` and `bursar gen` end to end: the real binary on the trace excerpts in `tests/data/`,
//! its output decoded as wire format v1 and fed to the real `bursar eval`.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed setup step aborts the test with its error"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bursar_model::{Event, EventKind, decode_event};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data").join(rel)
}

fn bursar(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar")).args(args).output().unwrap();
    assert!(out.status.success(), "bursar {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn events(out: &Output) -> Vec<Event> {
    let text = std::str::from_utf8(&out.stdout).unwrap();
    let evs: Vec<Event> = text.lines().map(|l| decode_event(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert!(evs.windows(2).all(|w| w[0].time <= w[1].time), "events are sorted by time");
    let mut ids = std::collections::HashSet::new();
    assert!(evs.iter().all(|e| ids.insert(e.id.clone())), "event ids are unique");
    evs
}

fn count(evs: &[Event], ty: &str) -> usize {
    evs.iter().filter(|e| e.kind.type_name() == ty).count()
}

#[test]
fn philly_sample_maps_every_job_with_its_lifecycle() {
    let file = data("philly/sampled_jobs.json");
    let out = bursar(&["import", "philly", file.to_str().unwrap()]);
    let evs = events(&out);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(report.contains("4206 records, 4206 mapped, 0 skipped"), "{report}");
    assert_eq!(count(&evs, "job.submitted"), 4206);
    assert_eq!(count(&evs, "job.started"), 4206);
    assert_eq!(count(&evs, "job.finished"), 4206);
    assert_eq!(count(&evs, "job.sample"), 0, "no samples without --util");
    let failed = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::JobFinished { status: bursar_model::FinishStatus::Failed, .. }))
        .count();
    assert_eq!(failed, 1672);
    let first = evs.iter().find(|e| e.id == "application_1506638472019_14199/submitted").unwrap();
    let EventKind::JobSubmitted(job) = &first.kind else { panic!("not a submission") };
    assert_eq!((job.project.as_str(), job.user.as_str(), job.gpus), ("ee9e8c", "ce2f4c", 8.into()));
    assert_eq!(first.time.to_string(), "2017-10-07T01:11:39Z");
    assert!((job.requested_hours - 3219.7 / 60.0).abs() < 1e-9);
}

#[test]
fn util_attachment_is_seeded_and_reads_the_real_series() {
    let file = data("philly/sampled_jobs.json");
    let util = data("alibaba-genai-2026/pod_gpu_duty_cycle_excerpt.csv");
    let args = |seed: &'static str| {
        vec![
            "import".to_owned(),
            "philly".into(),
            file.display().to_string(),
            "--util".into(),
            util.display().to_string(),
            "--seed".into(),
            seed.into(),
            "--sample-every".into(),
            "1h".into(),
        ]
    };
    let run = |seed| {
        let a = args(seed);
        bursar(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (a, b, c) = (run("7"), run("7"), run("8"));
    assert_eq!(a.stdout, b.stdout, "same seed, same bytes");
    assert_ne!(a.stdout, c.stdout, "another seed maps other series");
    let evs = events(&a);
    let samples: Vec<f64> = evs
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::JobSample(bursar_model::Sample { gpu_util, .. }) => Some(gpu_util),
            _ => None,
        })
        .collect();
    assert!(samples.len() > 50_000, "{} samples", samples.len());
    assert!(samples.iter().all(|u| (0.0..=1.0).contains(u)));
    assert!(samples.contains(&0.0) && samples.iter().any(|&u| u > 0.5), "idle and busy stretches");
    let report = String::from_utf8_lossy(&a.stderr);
    assert!(report.contains("--util: 4 series"), "the short series is dropped: {report}");
}

#[test]
fn openb_excerpt_skips_cpu_only_pods_and_says_why() {
    let file = data("alibaba-gpu-2023/openb_pod_list_excerpt.csv");
    let out = bursar(&["import", "openb", file.to_str().unwrap()]);
    let evs = events(&out);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(report.contains("400 records, 376 mapped, 24 skipped"), "{report}");
    assert!(report.contains("skipped 24: no GPU requested (`num_gpu` = 0)"), "{report}");
    assert_eq!(count(&evs, "job.submitted"), 376);
    let projects: std::collections::BTreeSet<String> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::JobSubmitted(j) => Some(j.project.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(projects.into_iter().collect::<Vec<_>>(), ["BE", "Burstable", "Guaranteed", "LS"]);
}

#[test]
fn sacct_sample_maps_allocations_only() {
    let file = data("sacct/sacct_parsable2.txt");
    let out = bursar(&["import", "sacct", file.to_str().unwrap()]);
    let evs = events(&out);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(report.contains("12 records, 8 mapped, 4 skipped"), "{report}");
    assert!(report.contains("skipped 3: job step"), "{report}");
    assert_eq!(count(&evs, "job.submitted"), 8);
    assert_eq!(count(&evs, "job.finished"), 6, "running and pending jobs have not finished");
}

#[test]
fn a_wrong_format_is_an_error_not_a_silent_empty_stream() {
    let file = data("sacct/sacct_parsable2.txt");
    let out =
        Command::new(env!("CARGO_BIN_EXE_bursar")).args(["import", "openb", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an OpenB pod list"));
}

#[test]
fn generated_stream_is_deterministic_and_eval_consumes_it() {
    let a = bursar(&["gen", "--jobs", "300", "--projects", "4", "--seed", "5"]);
    let b = bursar(&["gen", "--jobs", "300", "--projects", "4", "--seed", "5"]);
    assert_eq!(a.stdout, b.stdout);
    let evs = events(&a);
    assert_eq!(count(&evs, "job.submitted"), 300);
    let dir = bursar_testkit::TempDir::new("import-test").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--allow-empty", "--policies", dir.to_str().unwrap(), "--events", "-", "--summary-json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&a.stdout).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(summary["events"].as_u64(), Some(evs.len() as u64), "{stderr}");
    assert_eq!(summary["malformed"].as_u64(), Some(0));
    assert_eq!(summary["unknown_jobs"].as_u64(), Some(0));
}

#[test]
fn modelled_throughput_is_seeded_labelled_and_needs_util() {
    let file = data("philly/sampled_jobs.json").display().to_string();
    let util = data("alibaba-genai-2026/pod_gpu_duty_cycle_excerpt.csv").display().to_string();
    let base =
        ["import", "philly", file.as_str(), "--util", util.as_str(), "--sample-every", "6h", "--model-throughput"];
    let a = bursar(&[&base[..], &["--seed", "7"]].concat());
    let b = bursar(&[&base[..], &["--seed", "7"]].concat());
    assert_eq!(a.stdout, b.stdout, "same seed, same bytes");
    let evs = events(&a);
    let mut samples = 0;
    for e in &evs {
        match &e.kind {
            EventKind::JobSubmitted(j) => {
                assert!(matches!(j.gpu_type.as_deref(), Some("modelled-a" | "modelled-b")), "{j:?}");
                assert_eq!(j.config.as_deref(), Some(format!("modelled-{}", j.user).as_str()));
            }
            EventKind::JobSample(s) => {
                samples += 1;
                assert_eq!(s.unit.as_deref(), Some("modelled-tokens/s"));
                let t = s.throughput.unwrap();
                assert!(t >= 0.0 && (s.gpu_util > 0.0 || t == 0.0), "no work on an idle GPU: {s:?}");
            }
            _ => {}
        }
    }
    assert!(samples > 10_000, "{samples}");
    let report = String::from_utf8_lossy(&a.stderr);
    assert!(report.contains("MODELLED throughput"), "the import says so: {report}");

    // Without --util there is nothing to attach it to.
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["import", "philly", file.as_str(), "--model-throughput"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--util"), "{}", String::from_utf8_lossy(&out.stderr));
}
