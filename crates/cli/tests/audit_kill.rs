//! SIGKILL in the middle of a long `bursar eval --audit`: the database must open, verify, and hold
//! every decision that had been printed before the kill (printing happens only after the commit).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use bursar_audit::AuditLog;

#[test]
fn a_killed_eval_leaves_a_log_holding_every_printed_decision() {
    let dir = std::env::temp_dir().join(format!("bursar-cli-audit-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    // A long stream: with no policy every job.submitted still gets its admission decision.
    let total = 400_000u64;
    let events = dir.join("events.jsonl");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&events).unwrap());
        for i in 0..total {
            let (d, h, m, sec) = (1 + i / 86_400 % 28, i / 3600 % 24, i / 60 % 60, i % 60);
            writeln!(
                w,
                r#"{{"id":"e{i}","time":"2026-11-{d:02}T{h:02}:{m:02}:{sec:02}Z","type":"job.submitted","job":{{"id":"j{i}","project":"p{}","user":"u{}","gpus":1,"requested_hours":1.0}}}}"#,
                i % 17,
                i % 101
            )
            .unwrap();
        }
    }
    let db = dir.join("k.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--allow-empty", "--policies"])
        .arg(dir.join("policies"))
        .arg("--events")
        .arg(&events)
        .arg("--audit")
        .arg(&db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut printed: Vec<String> = Vec::new();
    let mut line = Vec::new();
    let mut killed = false;
    loop {
        line.clear();
        if out.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            break; // a partial line cut by the kill was not printed whole
        }
        printed.push(String::from_utf8(line[..line.len() - 1].to_vec()).unwrap());
        if !killed && printed.len() >= 30_000 {
            child.kill().unwrap(); // SIGKILL on Unix
            killed = true;
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "eval must have been killed mid-stream, not finished");
    assert!((printed.len() as u64) < total, "eval finished before the kill");

    let log = AuditLog::open_read(&db).unwrap();
    let rep = bursar_audit::verify::verify(&log).unwrap();
    assert!(rep.is_ok(), "{rep:?}");
    let stored: Vec<String> =
        log.decisions_since(0, usize::MAX).unwrap().into_iter().map(|d| d.wire_json().unwrap().into_owned()).collect();
    assert!(stored.len() >= printed.len(), "{} stored < {} printed", stored.len(), printed.len());
    // Printed decisions are a prefix of the stored ones, byte for byte.
    assert_eq!(&stored[..printed.len()], &printed[..]);
    drop(log);

    // The verify command agrees, and a rerun completes the log without duplicating a row.
    let v = Command::new(env!("CARGO_BIN_EXE_bursar")).args(["audit", "--db"]).arg(&db).arg("verify").output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let rerun = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--allow-empty", "--durability", "fast", "--policies"])
        .arg(dir.join("policies"))
        .arg("--events")
        .arg(&events)
        .arg("--audit")
        .arg(&db)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(rerun.status.success(), "{}", String::from_utf8_lossy(&rerun.stderr));
    let log = AuditLog::open_read(&db).unwrap();
    assert_eq!(log.last_decision_seq() as u64, total);
    assert_eq!(log.last_event_seq() as u64, total);
    assert!(bursar_audit::verify::verify(&log).unwrap().is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}
