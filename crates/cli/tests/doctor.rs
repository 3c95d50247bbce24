//! `bursar doctor` through the real binary, against a real Prometheus (scraping a dcgm-exporter
//! stand-in) and a real Alertmanager, each started once here and stopped by PID: a ready
//! installation passes every check and the test notice reaches Alertmanager's receiver; a broken
//! policy, an exposed signing key and an edited audit log each fail with a hint, and the exit code
//! says so.

#![expect(clippy::unwrap_used, reason = "integration test")]

use std::process::Command;
use std::time::Duration;

use crate::serve_support::*;
use bursar_testkit::{Alertmanager, FakeDcgm, Prometheus, WebhookReceiver};

fn doctor(cfg: &std::path::Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["doctor", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn doctor_passes_a_ready_installation_and_names_what_is_broken() {
    if Prometheus::binary().is_none() || Alertmanager::binary().is_none() {
        bursar_testkit::need::missing("prometheus or alertmanager", "scripts/setup.sh");
        return;
    }
    // dcgm-exporter's job mapping: GPU 0 and 1 run jobs 101 and 102 (series carry `hpc_job`).
    let map_dir = std::env::temp_dir().join(format!("bursar-doctor-map-{}", std::process::id()));
    std::fs::create_dir_all(&map_dir).unwrap();
    std::fs::write(map_dir.join("0"), "101\n").unwrap();
    std::fs::write(map_dir.join("1"), "102\n").unwrap();
    let dcgm = FakeDcgm::start("node1", 2, Some(map_dir.clone())).unwrap();
    let prom = Prometheus::start(&[dcgm.addr()], Duration::from_secs(1)).unwrap();
    let hook = WebhookReceiver::start().unwrap();
    let am = Alertmanager::start(&hook.url("/am")).unwrap();
    let s = Scratch::new("doctor");
    s.write_policy(
        "quota.toml",
        "[[policy]]\nid = \"quota/q\"\ndescription = \"q\"\nkind = \"quota\"\ngpu_hours = 100\n",
    );
    // A key pair for the witness.
    let key = s.0.join("audit");
    assert!(
        Command::new(env!("CARGO_BIN_EXE_bursar"))
            .args(["audit", "keygen", "--out", key.to_str().unwrap()])
            .status()
            .unwrap()
            .success()
    );
    let cfg = s.0.join("bursar.toml");
    std::fs::write(
        &cfg,
        format!(
            "[serve]\npolicies = \"policies\"\naudit = \"audit.db\"\n\n[witness]\nsigning_key = \"audit.key\"\nfile = \"witness.jsonl\"\n\n[utilisation.prometheus]\nserver = \"{}\"\n\n[utilisation.jobs]\nkeys = \"bursar\"\n\n[notify]\npublic_url = \"http://127.0.0.1:7878\"\n[notify.alertmanager]\nurl = \"{}\"\n",
            prom.url(),
            am.url()
        ),
    )
    .unwrap();
    // A log written by eval with the witness, as serve would.
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--policies", s.policies().to_str().unwrap(), "--events"])
        .arg(serve_support_events(&s))
        .args([
            "--audit",
            s.audit().to_str().unwrap(),
            "--signing-key",
            key.with_extension("key").to_str().unwrap(),
            "--witness",
        ])
        .arg(s.0.join("witness.jsonl"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Prometheus needs a scrape or two before the query has series.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !prom.query("DCGM_FI_DEV_GPU_UTIL{hpc_job!=\"\"}").unwrap_or_default().contains("\"hpc_job\":\"102\"") {
        assert!(std::time::Instant::now() < deadline, "Prometheus never scraped the mapped series:\n{}", dcgm.render());
        std::thread::sleep(Duration::from_millis(250));
    }
    let (code, text) = doctor(&cfg);
    assert_eq!(code, 0, "{text}");
    for line in [
        "ok    policies",
        "ok    audit log",
        "ok    signing key",
        "ok    witness",
        "prometheus",
        "ok    notices",
        "bursar doctor: ready",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    assert!(text.contains("2 series of DCGM_FI_PROF_GR_ENGINE_ACTIVE, 2 series of DCGM_FI_DEV_GPU_UTIL"), "{text}");
    // A GPU without the profiling metric is read from DCGM_FI_DEV_GPU_UTIL: samples flow, so no
    // "no series" warning (issue 45: doctor checked only the profiling metric).
    for gpu in 0..2 {
        dcgm.set(gpu, bursar_testkit::dcgm::Field::GrEngineActive, None);
    }
    std::thread::sleep(Duration::from_secs(3));
    let (code, text) = doctor(&cfg);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("ok    prometheus")
            && text.contains("0 series of DCGM_FI_PROF_GR_ENGINE_ACTIVE, 2 series of DCGM_FI_DEV_GPU_UTIL"),
        "{text}"
    );
    // The test notice went through Alertmanager to its receiver.
    let got = hook.wait_for(Duration::from_secs(20), |r| r.iter().find(|x| x.body.contains("bursar doctor")).cloned());
    assert!(got.is_some(), "Alertmanager did not route the test notice");

    // Broken: an exposed signing key, then an edited log, then a policy that does not compile.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(key.with_extension("key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, text) = doctor(&cfg);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL  signing key") && text.contains("hint: `chmod 600"), "{text}");
    std::fs::set_permissions(key.with_extension("key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let conn = bursar_audit::AuditLog::open(s.audit(), bursar_audit::Durability::Fast).unwrap();
    conn.connection().execute("UPDATE decisions SET reason = 'edited' WHERE seq = 1", []).unwrap();
    drop(conn);
    let (code, text) = doctor(&cfg);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL  audit log") && text.contains("does not verify"), "{text}");
    s.write_policy("broken.toml", "[[policy]]\nid = \"x\"\n");
    let (code, text) = doctor(&cfg);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL  policies"), "{text}");
    drop((am, prom, dcgm));
    let _ = std::fs::remove_dir_all(&map_dir);
}

/// A few events of the example stream, written beside the test's files.
fn serve_support_events(s: &Scratch) -> std::path::PathBuf {
    let path = s.0.join("events.jsonl");
    let lines: Vec<String> = (1..=5).map(|n| submit(&format!("e{n}"), &format!("j{n}"), "nlp", 1, 1.0)).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}
