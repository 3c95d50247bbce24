//! Regression test for issue 14, item 9, through the real `bursar serve`: editing the newest engine
//! snapshot (every ledger's reserved GPU-hours and held GPUs set to 0) used to reset the quota after a
//! restart, and `verify` still passed. Now the restarted server refuses the snapshot (loudly, in its
//! log), replays the log instead and reports the same usage as before; `verify` names the snapshot.

use crate::serve_support::*;
use serde_json::Value;

fn project(server: &Server) -> Value {
    let mut p = server.get_json("/v1/projects/nlp");
    if let Some(o) = p.as_object_mut() {
        o.remove("engine_time");
    }
    p
}

/// Sets every number under a key named `reserved` or `held_gpus` to 0.
fn zero(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if (k == "reserved" || k == "held_gpus") && x.is_number() {
                    *x = Value::from(0);
                } else {
                    zero(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(zero),
        _ => {}
    }
}

#[test]
fn an_edited_snapshot_is_refused_on_restart_and_the_usage_is_replayed() {
    let s = Scratch::new("audit-snapshot");
    let server = Server::start(&s, &["--snapshot-every", "1h"]);
    for i in 1..=4 {
        let d = server.post("/v1/admit", &submit(&format!("e{i}"), &format!("j{i}"), "nlp", 2, 3.0)).json().unwrap();
        assert_eq!(d["decision"], "allow", "{d}");
    }
    assert_eq!(server.post("/v1/snapshot", "").status, 200);
    let before = project(&server);
    server.kill9();
    let verify = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
            .args(["audit", "--db"])
            .arg(s.audit())
            .arg("verify")
            .output()
            .unwrap()
    };
    // What serve wrote passes every check, the cross-chain ones included.
    let v = verify();
    assert!(v.status.success(), "{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));

    // The attacker edits the newest snapshot.
    let log = bursar_audit::AuditLog::open(s.audit(), bursar_audit::Durability::Fast).unwrap();
    let (seq, blob): (i64, Vec<u8>) = log
        .connection()
        .query_row("SELECT event_seq, blob FROM engine_snapshots ORDER BY event_seq DESC LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let mut snap: Value = serde_json::from_slice(&blob).unwrap();
    let original = snap.clone();
    zero(&mut snap);
    assert_ne!(snap, original, "the snapshot holds reserved hours to zero");
    let edited = serde_json::to_vec(&snap).unwrap();
    log.connection().execute("UPDATE engine_snapshots SET blob = ?1 WHERE event_seq = ?2", (&edited, seq)).unwrap();
    drop(log);

    let v = verify();
    assert_eq!(v.status.code(), Some(1));
    let err = String::from_utf8_lossy(&v.stderr);
    assert!(err.contains(&format!("the engine snapshot at event {seq} does not match its anchor")), "{err}");

    let server = Server::start(&s, &[]);
    // Replayed from the log: the same usage as before the crash, not the edited one ...
    assert_eq!(project(&server), before);
    // ... and said so in the server's log.
    let text = server.log_text();
    assert!(text.contains("an engine snapshot was refused"), "{text}");
    let (status, _) = server.terminate();
    assert!(status.success());
}

/// Restarts after a prune (issue 36).
#[cfg(test)]
mod pruned {
    use super::*;

    /// A submission dated `time`.
    fn submit_at(id: &str, job: &str, time: &str) -> String {
        let mut line: Value = serde_json::from_str(&submit(id, job, "nlp", 2, 3.0)).unwrap();
        line["time"] = Value::from(time);
        line.to_string()
    }

    /// RFC 3339, `ms` from now (serve takes events up to its clock skew ahead of the wall clock).
    fn at(ms: i64) -> String {
        bursar_model::Timestamp(wall_ms() + ms).to_string()
    }

    /// `bursar audit prune --before BEFORE`: how many events it pruned, and its stderr.
    fn prune(s: &Scratch, before: &str) -> (u64, String) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
            .args(["audit", "--db"])
            .arg(s.audit())
            .args(["prune", "--before", before])
            .output()
            .unwrap();
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "{stdout}{stderr}");
        let n = stdout.strip_prefix("pruned ").and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok());
        (n.unwrap_or_else(|| panic!("no count in {stdout}")), stderr)
    }

    const MINUTE: i64 = 60_000;

    /// Every serve start journals a wall tick dated now, so the prunable prefix here ends at an event
    /// dated a few minutes ahead (within serve's clock skew): the prune takes everything before it.
    fn admit(server: &Server, id: &str, job: &str, time: &str) {
        let d = server.post("/v1/admit", &submit_at(id, job, time)).json().unwrap();
        assert_eq!(d["decision"], "allow", "{d}");
    }

    /// Issue 36: a pruned log restarts from the snapshot taken after its prune, with the pruned jobs'
    /// usage in it.
    #[test]
    fn a_pruned_log_restarts_from_the_snapshot_after_its_prune() {
        let s = Scratch::new("audit-prune-kept");
        let server = Server::start(&s, &["--snapshot-every", "1h", "--tick", "1h"]);
        admit(&server, "e1", "j1", &at(0));
        admit(&server, "e2", "j2", &at(0));
        admit(&server, "e3", "j3", &at(3 * MINUTE));
        assert_eq!(server.post("/v1/snapshot", "").status, 200);
        let before = project(&server);
        server.kill9();

        let (pruned, stderr) = prune(&s, &at(2 * MINUTE));
        assert!(pruned >= 2, "e1 and e2 are pruned");
        assert!(!stderr.contains("warning"), "{stderr}");

        let server = Server::start(&s, &["--tick", "1h"]);
        assert_eq!(project(&server), before, "the pruned jobs' usage comes back with the snapshot");
        let health = server.get("/healthz").unwrap().text();
        assert!(!health.contains("note:"), "{health}");
        let (status, _) = server.terminate();
        assert!(status.success());
    }

    /// Issue 36: without a snapshot after the prune, what is left to replay starts mid-stream; serve
    /// used to start from it with the pruned jobs' reservations forgotten. Now it does not start unless
    /// told to, and then says so on /healthz.
    #[test]
    fn a_pruned_log_without_a_snapshot_after_its_prune_does_not_start_on_what_is_left() {
        let s = Scratch::new("audit-prune-lost");
        let server = Server::start(&s, &["--snapshot-every", "1h", "--tick", "1h"]);
        admit(&server, "e1", "j1", &at(0));
        assert_eq!(server.post("/v1/snapshot", "").status, 200);
        // Submitted after the snapshot and pruned with the rest: only a replay from before could know it.
        admit(&server, "e2", "j2", &at(0));
        admit(&server, "e3", "j3", &at(3 * MINUTE));
        let before = project(&server);
        server.kill9();

        let (pruned, stderr) = prune(&s, &at(2 * MINUTE));
        assert!(pruned >= 2, "e1 and e2 are pruned");
        assert!(stderr.contains("warning: no usable engine snapshot at or after event"), "{stderr}");
        assert!(stderr.contains("`bursar serve` will not start from this log"), "{stderr}");

        let log = Server::try_start(&s, &["--tick", "1h"])
            .err()
            .expect("serve started on a pruned log with no snapshot after the prune");
        assert!(log.contains("the audit log was pruned through event"), "{log}");
        assert!(log.contains("is older than the prune of the events through event"), "{log}");
        assert!(log.contains("--replay-after-prune"), "{log}");

        let server = Server::start(&s, &["--tick", "1h", "--replay-after-prune"]);
        let health = server.get("/healthz").unwrap().text();
        assert!(health.contains("note: refused: the log was pruned through event"), "{health}");
        assert!(health.contains("jobs and usage from before it are not counted"), "{health}");
        assert_ne!(project(&server), before, "the state is what the remaining events give");
        let (status, _) = server.terminate();
        assert!(status.success());
    }
}
