//! Regression test for quarantine poisoning (issue 14, item 7), through the real `bursar` binary and a
//! real guest (the readiness policy built from `policies/wasm/readiness` by `scripts/build-wasm.sh`),
//! with the limits of `policies/fair-share.toml` (16 MiB, `max_failures = 5`). What broke: five
//! submissions from one project carrying a 20 MB unknown field failed the guest five times, the policy
//! was quarantined, and every other project's next job was denied. Then those five got the configured
//! `on_error` outcome with a reason saying the input was too large; since issue 46 every field an
//! event carries is bounded (a field v1 does not define to 4,096 bytes of JSON), so they are refused
//! as malformed lines before any policy sees them, and the policy stays in service either way. (The
//! host's own guard against an input too large for the guest's memory is tested in
//! `crates/wasm/tests`.)

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn policy_dir(on_error: &str) -> PathBuf {
    let status = Command::new("bash").arg(root().join("scripts/build-wasm.sh")).status().unwrap();
    assert!(status.success(), "scripts/build-wasm.sh failed");
    let dir = std::env::temp_dir().join(format!("bursar-wasm-poison-{on_error}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root().join("policies/wasm/readiness.wasm"), dir.join("readiness.wasm")).unwrap();
    std::fs::write(
        dir.join("data.toml"),
        format!(
            r#"[[policy]]
id = "wasm/data-ready"
kind = "wasm"
description = "The data must be ready."
component = "readiness.wasm"
events = ["job.submitted"]
on_error = "{on_error}"

[policy.limits]
deadline_ms = 60000
memory_mb = 16
max_failures = 5

[policy.config]
require = ["data"]
"#
        ),
    )
    .unwrap();
    dir
}

fn submit(n: u32, project: &str, data: bool, blob: usize) -> String {
    format!(
        r#"{{"id":"e{n}","time":"2026-11-02T09:0{n}:00Z","type":"job.submitted","blob":"{}","job":{{"id":"j{n}","project":"{project}","user":"u","gpus":1,"requested_hours":1.0,"ready":{{"image":true,"data":{data},"script":true}}}}}}"#,
        "x".repeat(blob)
    )
}

fn eval(dir: &Path, lines: &[String]) -> (Vec<serde_json::Value>, String) {
    let events = dir.join("events.jsonl");
    std::fs::write(&events, lines.join("\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--policies"])
        .arg(dir)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect(), stderr)
}

#[test]
fn five_twenty_megabyte_submissions_do_not_disarm_a_wasm_policy_for_every_project() {
    for on_error in ["deny", "allow"] {
        let dir = policy_dir(on_error);
        let mut lines: Vec<String> = (1..=5).map(|n| submit(n, "mallory", true, 20 << 20)).collect();
        // Another project's jobs: one not ready (the guest denies it), one ready (it allows it).
        lines.push(submit(6, "nlp", false, 0));
        lines.push(submit(7, "nlp", true, 0));
        let (d, stderr) = eval(&dir, &lines);
        // The offending ones never reach a policy: each is a malformed line, saying why.
        for n in 1..=5 {
            assert!(stderr.contains(&format!(":{n}: skipped malformed event")), "{stderr}");
        }
        assert!(stderr.contains("`blob` is 20971") && stderr.contains("above the 4096 bytes"), "{stderr}");
        assert_eq!(d.len(), 2, "{d:?}");
        // The other project's jobs get the guest's own answers: the policy is still in service.
        assert_eq!(
            d[0]["reason"],
            "job j6 is not ready: data not declared ready; GPUs are granted only when data are ready"
        );
        assert_eq!(d[0]["decision"], "deny", "{}", d[0]);
        assert_eq!(d[1]["decision"], "allow", "{}", d[1]);
        assert!(!d[1]["reason"].as_str().unwrap().contains("quarantined"), "{}", d[1]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
