//! `bursar auth token` prints a `[[principal]]` table that grants no more than was asked (issue 45: a
//! table without a `jobs` line, pasted as printed, let a scheduler speak for every job namespace).

#![expect(clippy::unwrap_used, reason = "test: a failure stops the test with its message")]

use std::process::{Command, Output};

fn token(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bursar")).args(["auth", "token"]).args(args).output().unwrap()
}

fn table(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    out.split("# in bursar.toml:\n").nth(1).unwrap_or_default().to_owned()
}

#[test]
fn a_principal_that_speaks_for_jobs_is_given_its_jobs_or_refused() {
    let o = token(&["--name", "slurmctld", "--role", "scheduler"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("say which jobs `slurmctld` may speak for") && err.contains("--jobs 'slurm-*'"), "{err}");
    assert!(o.stdout.is_empty(), "a token was printed anyway");

    let o = token(&["--name", "slurmctld", "--role", "scheduler", "--jobs", "slurm-*", "--jobs", "lab-*"]);
    assert!(o.status.success());
    let t = table(&o);
    assert!(t.contains("jobs = [\"slurm-*\", \"lab-*\"]\n"), "{t}");

    // What is printed is a table the configuration takes as it is.
    let dir = std::env::temp_dir().join(format!("bursar-auth-token-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    let cfg = dir.join("bursar.toml");
    std::fs::write(&cfg, format!("[serve]\npolicies = \"policies\"\naudit = \"audit.db\"\n{t}")).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_bursar")).args(["config", "check"]).arg(&cfg).output().unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let shown = Command::new(env!("CARGO_BIN_EXE_bursar")).args(["config", "show"]).arg(&cfg).output().unwrap();
    assert!(String::from_utf8_lossy(&shown.stdout).contains("slurm-*"), "{}", String::from_utf8_lossy(&shown.stdout));
    let _ = std::fs::remove_dir_all(&dir);

    let o = token(&["--name", "agents", "--role", "producer", "--all-jobs"]);
    assert!(o.status.success());
    let t = table(&o);
    assert!(!t.contains("\njobs =") && t.contains("it may speak for every job (--all-jobs)"), "{t}");

    // A reader speaks for no job: no line is needed.
    let o = token(&["--name", "grafana", "--role", "reader"]);
    assert!(o.status.success());
    assert!(!table(&o).contains("jobs"), "{}", table(&o));
}
