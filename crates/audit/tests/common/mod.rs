//! Helpers shared by the audit integration tests: temp dirs and sample events and decisions.
#![allow(dead_code, reason = "each test binary uses a different subset of the helpers")]
#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::PathBuf;
use std::sync::Arc;

use bursar_audit::Record;
use bursar_model::{Decision, DecisionKind, Timestamp, decode_event};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("bursar-audit-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The raw line of a `job.submitted` event `e{i}` for job `j{i}` in `project`, at day `day` of Nov 2026.
pub fn submitted_line(i: u64, project: &str, user: &str, day: u32) -> String {
    format!(
        r#"{{"id":"e{i}","time":"2026-11-{day:02}T09:00:00Z","type":"job.submitted","job":{{"id":"j{i}","project":"{project}","user":"{user}","gpus":8,"requested_hours":4.0}}}}"#
    )
}

/// A decision about job `j{i}` caused by event `e{i}`.
pub fn decision(i: u64, n: usize, project: &str, user: &str, day: u32, kind: DecisionKind, policy: &str) -> Decision {
    Decision {
        decision_id: format!("e{i}/{n}"),
        event_id: format!("e{i}"),
        time: Timestamp::parse(&format!("2026-11-{day:02}T09:00:00Z")).unwrap(),
        job_id: Some(format!("j{i}").into()),
        project: Some(project.into()),
        decision: kind,
        until: None,
        policies: vec![policy.into()],
        reason: format!("{policy} said {}", kind.as_str()),
        dry_run: false,
        admission: n == 0,
        user: Some(user.into()),
        gpus: Some(8),
        gpu_hours: Some(32.0),
        hints: None,
    }
}

/// An entry: submitted event `e{i}` and one decision of `kind`.
pub fn entry(i: u64, project: &str, user: &str, day: u32, kind: DecisionKind, policy: &str, set: &str) -> Record {
    let raw = submitted_line(i, project, user, day);
    let ev = decode_event(&raw).unwrap();
    Record::new(&raw, &ev, vec![decision(i, 0, project, user, day, kind, policy)], Arc::from(set))
}
