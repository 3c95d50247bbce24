//! Hot reload: an edited policy file (saved the way editors do, by rename) changes the next decision
//! without a restart; a broken edit leaves the previous set in force, is shown by `/v1/policies` with
//! its `file:line:col`, and is recorded in the audit log. SIGHUP and `POST /v1/reload` reload too.

use crate::serve_support::*;
use serde_json::Value;

const QUOTA_100: &str = r#"[[policy]]
id = "quota/q"
description = "monthly GPU-hours of a project"
kind = "quota"
gpu_hours = 100
"#;

const QUOTA_40: &str = r#"[[policy]]
id = "quota/q"
description = "monthly GPU-hours of a project"
kind = "quota"
gpu_hours = 40
"#;

const BROKEN: &str = r#"[[policy]]
id = "quota/q"
description = "monthly GPU-hours of a project"
kind = "quota"
gpu_hours = "lots"
"#;

fn policies(server: &Server) -> Value {
    server.get_json("/v1/policies")
}

#[test]
fn edited_policy_changes_the_next_decision_and_a_broken_edit_keeps_the_old_one() {
    let s = Scratch::new("serve-reload");
    s.write_policy("quota.toml", QUOTA_100);
    let server = Server::start(&s, &["--debounce", "50ms"]);
    let p0 = policies(&server);
    assert_eq!(p0["policies"][0]["id"], "quota/q", "{p0}");
    let digest0 = p0["digest"].as_str().unwrap().to_owned();

    // 32 GPU-hours of 100: allowed.
    let d = server.post("/v1/admit", &submit("e1", "j1", "nlp", 8, 4.0)).json().unwrap();
    assert_eq!(d["decision"], "allow", "{d}");

    // Lower the quota to 40: the same request (32 more, 64 in all) is now denied.
    s.write_policy("quota.toml", QUOTA_40);
    let p1 = server.wait_for(30, "the edited policy to load", || {
        let p = policies(&server);
        (p["digest"] != digest0.as_str()).then_some(p)
    });
    assert_eq!(p1["last_reload"]["status"], "loaded", "{p1}");
    assert_eq!(p1["last_reload"]["cause"], "watch", "{p1}");
    let d = server.post("/v1/admit", &submit("e2", "j2", "nlp", 8, 4.0)).json().unwrap();
    assert_eq!(d["decision"], "deny", "{d}");
    assert_eq!(d["policies"][0], "quota/q");
    assert!(d["reason"].as_str().unwrap().contains("of its 40 GPU-hours"), "{d}");

    // A broken edit: the 40 GPU-hour set stays in force, and the error is shown with file:line:col.
    s.write_policy("quota.toml", BROKEN);
    let p2 = server.wait_for(30, "the broken edit to be reported", || {
        let p = policies(&server);
        (p["last_reload"]["ok"] == false).then_some(p)
    });
    assert_eq!(p2["digest"], p1["digest"], "the old set must stay in force: {p2}");
    let err = p2["last_reload"]["errors"][0].as_str().unwrap();
    assert!(err.contains("quota.toml:5:"), "{err}");
    let d = server.post("/v1/admit", &submit("e3", "j3", "nlp", 8, 4.0)).json().unwrap();
    assert_eq!(d["decision"], "deny", "{d}");
    assert!(d["reason"].as_str().unwrap().contains("of its 40 GPU-hours"), "{d}");
    // State survived both reloads: j1 is still live and its reservation counted.
    assert_eq!(server.get_json("/v1/jobs/j1")["phase"], "admitted");
    assert_eq!(server.get_json("/v1/projects/nlp")["month"]["reserved"], 32.0);
    let metrics = server.get("/metrics").unwrap().text();
    assert!(metrics.contains("bursar_reloads_total{outcome=\"failed\"} 1\n"), "{metrics}");

    // POST /v1/reload answers with the outcome: still failing (422) until the file is fixed.
    let r = server.post("/v1/reload", "");
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.json().unwrap()["errors"][0].as_str().unwrap().contains("quota.toml:5:"));

    // Fixed, then SIGHUP: back to 100 GPU-hours, so a 32 GPU-hour job fits again (32 + 32 of 100).
    std::fs::write(s.policies().join("quota.toml"), QUOTA_100).unwrap();
    let _ = std::process::Command::new("kill").arg("-HUP").arg(server.child.id().to_string()).status();
    server.wait_for(30, "the fixed policy to load", || {
        let p = policies(&server);
        (p["digest"] == digest0.as_str() && p["last_reload"]["ok"] == true).then_some(())
    });
    let d = server.post("/v1/admit", &submit("e4", "j4", "nlp", 8, 4.0)).json().unwrap();
    assert_eq!(d["decision"], "allow", "{d}");

    // Every load and the failure are in the audit log, the failure with its location.
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains("policy reload failed"), "{log}");
    let audit = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    let loads = audit.policy_loads().unwrap();
    let failed: Vec<_> = loads.iter().filter(|l| !l.ok).collect();
    assert!(!failed.is_empty(), "{loads:?}");
    assert!(failed[0].error.as_deref().unwrap().contains("quota.toml:5:"), "{loads:?}");
    assert!(loads.iter().filter(|l| l.ok).count() >= 3, "{loads:?}");
}
