//! The real `bursar` binary over a directory that mixes a TOML policy and a WebAssembly policy (the
//! readiness guest built from `policies/wasm/readiness` by `scripts/build-wasm.sh`): `check` loads
//! both, `eval` combines their verdicts like any two policies, and a manifest whose component is missing
//! is a `check` error pointing at the manifest. A guest's bytes are in the policy-set digest: replacing
//! the `.wasm` under a running serve is a new set, and the new guest decides under its own digest.

#![expect(clippy::unwrap_used, reason = "test helpers: a failed setup step aborts the test with its error")]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::serve_support::{Scratch, Server};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn built_readiness() -> PathBuf {
    let status = Command::new("bash").arg(root().join("scripts/build-wasm.sh")).status().unwrap();
    assert!(status.success(), "scripts/build-wasm.sh failed");
    root().join("policies/wasm/readiness.wasm")
}

fn mixed_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bursar-wasm-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(built_readiness(), dir.join("readiness.wasm")).unwrap();
    std::fs::write(
        dir.join("image.toml"),
        r#"[[policy]]
id = "toml/image-ready"
description = "The image must be ready."
kind = "readiness"
require = ["image"]
action = "deny"
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("data.toml"),
        r#"[[policy]]
id = "wasm/data-ready"
kind = "wasm"
description = "The data must be ready."
component = "readiness.wasm"
events = ["job.submitted"]
on_error = "deny"

[policy.limits]
deadline_ms = 60000

[policy.config]
require = ["data"]
"#,
    )
    .unwrap();
    dir
}

fn submit(n: u32, image: bool, data: bool) -> String {
    format!(
        r#"{{"id":"e{n}","time":"2026-11-02T09:0{n}:00Z","type":"job.submitted","job":{{"id":"j{n}","project":"nlp","user":"alice","gpus":1,"requested_hours":1.0,"ready":{{"image":{image},"data":{data},"script":true}}}}}}"#
    )
}

#[test]
fn eval_combines_toml_and_wasm_policies_from_one_directory() {
    let dir = mixed_dir("eval");
    let check = Command::new(env!("CARGO_BIN_EXE_bursar")).arg("check").arg(&dir).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    let events = dir.join("events.jsonl");
    std::fs::write(
        &events,
        [submit(1, false, true), submit(2, true, false), submit(3, false, false), submit(4, true, true)].join("\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--policies"])
        .arg(&dir)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decisions: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let got: Vec<(String, String, Vec<String>)> = decisions
        .iter()
        .map(|d| {
            (
                d["job_id"].as_str().unwrap().to_owned(),
                d["decision"].as_str().unwrap().to_owned(),
                d["policies"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_owned()).collect(),
            )
        })
        .collect();
    let s = |x: &str| x.to_owned();
    // Policies are listed in load order: files sorted by path, so data.toml before image.toml.
    assert_eq!(
        got,
        vec![
            (s("j1"), s("deny"), vec![s("toml/image-ready")]),
            (s("j2"), s("deny"), vec![s("wasm/data-ready")]),
            (s("j3"), s("deny"), vec![s("wasm/data-ready"), s("toml/image-ready")]),
            (s("j4"), s("allow"), vec![s("wasm/data-ready"), s("toml/image-ready")]),
        ]
    );
    assert_eq!(
        decisions[1]["reason"],
        "job j2 is not ready: data not declared ready; GPUs are granted only when data are ready"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_reports_a_missing_component_at_the_manifest() {
    let dir = mixed_dir("missing");
    std::fs::remove_file(dir.join("readiness.wasm")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar")).arg("check").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data.toml"), "{err}");
    assert!(err.contains("cannot read component"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 46: a guest's bytes were not in the policy-set digest: replacing its `.wasm` and reloading
/// answered "unchanged", the next admission still ran the old guest, and after a restart the new
/// guest decided under the old digest, so the log named the wrong code. Now the digest covers every
/// guest's bytes, a replaced guest is a reload that changes the set, `/v1/policies` lists each
/// guest with its digest, and the audit log records the set with the guest's file.
#[test]
fn a_replaced_guest_is_a_new_policy_set_named_by_the_log() {
    let readiness = built_readiness();
    let fair_share = readiness.with_file_name("fair-share.wasm");
    let s = Scratch::new("wasm-digest");
    std::fs::copy(&readiness, s.policies().join("guest.wasm")).unwrap();
    // One configuration both guests read: readiness takes `require`, fair share `pool_gpus`.
    s.write_policy(
        "guest.toml",
        "[[policy]]\nid = \"wasm/guest\"\nkind = \"wasm\"\ndescription = \"a guest\"\ncomponent = \"guest.wasm\"\nevents = [\"job.submitted\"]\non_error = \"deny\"\n\n[policy.limits]\ndeadline_ms = 60000\n\n[policy.config]\nrequire = [\"data\"]\npool_gpus = 64\n",
    );
    let server = Server::start(&s, &["--no-watch"]);
    let sha = |p: &Path| {
        use sha2::Digest;
        sha2::Sha256::digest(std::fs::read(p).unwrap()).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let before = server.get_json("/v1/policies");
    let guests = before["guests"].as_array().unwrap().clone();
    assert_eq!(guests.len(), 1, "{before}");
    assert_eq!(
        (guests[0]["policy"].as_str(), guests[0]["digest"].as_str()),
        (Some("wasm/guest"), Some(sha(&readiness).as_str()))
    );
    assert!(before["files"].as_array().unwrap().iter().any(|f| f["digest"] == guests[0]["digest"]), "{before}");
    let not_ready = |n: u32| {
        format!(
            r#"{{"id":"e{n}","time":"{}","type":"job.submitted","job":{{"id":"j{n}","project":"nlp","user":"alice","gpus":1,"requested_hours":1.0,"ready":{{"image":true,"data":false,"script":true}}}}}}"#,
            crate::serve_support::now()
        )
    };
    let d = server.post("/v1/admit", &not_ready(1)).json().unwrap();
    assert_eq!(d["decision"], "deny", "the readiness guest: {d}");

    // Replace the guest (the manifest is unchanged) and reload.
    std::fs::copy(&fair_share, s.policies().join("guest.wasm")).unwrap();
    let r = server.post("/v1/reload", "");
    assert_eq!(r.status, 200, "{}", r.text());
    let outcome = r.json().unwrap();
    assert_ne!(outcome["status"], "unchanged", "{outcome}");
    let after = server.get_json("/v1/policies");
    assert_ne!(after["digest"], before["digest"], "{after}");
    assert_eq!(after["guests"][0]["digest"].as_str(), Some(sha(&fair_share).as_str()), "{after}");
    let d = server.post("/v1/admit", &not_ready(2)).json().unwrap();
    assert_eq!(d["decision"], "allow", "the next admission runs the new guest: {d}");

    // After a restart the new guest decides under the new digest, and the log names its bytes.
    drop(server);
    let server = Server::start(&s, &["--no-watch"]);
    assert_eq!(server.get_json("/v1/policies")["digest"], after["digest"]);
    drop(server);
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    let (files,): (String,) = log
        .connection()
        .query_row("SELECT files FROM policy_sets WHERE digest = ?1", [after["digest"].as_str().unwrap()], |r| {
            Ok((r.get(0)?,))
        })
        .unwrap();
    assert!(files.contains("guest.wasm") && files.contains(&sha(&fair_share)), "{files}");
}
