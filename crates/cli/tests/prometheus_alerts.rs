//! The example alerting rules, `integrations/prometheus/bursar-alerts.yml` (docs/operations.md,
//! "Monitor"), against real tools: `promtool check rules` accepts them and `promtool test rules`
//! runs their unit tests (each alert fires on the series that should raise it, with its labels and
//! annotations, and a healthy serve raises none); a real Prometheus (Debian's 2.42) loads them,
//! scrapes a real `bursar serve` as the job `bursar`, evaluates every rule without error, and fires
//! `BursarPolicyReloadFailed` when a reload fails and resolves it when the next one succeeds. Every
//! bursar metric a rule names is one serve exports, so renaming a metric breaks this test rather
//! than a site's alerting.
//!
//! Skips, saying so, when Prometheus is not installed (`scripts/setup.sh` installs it).

#![expect(clippy::unwrap_used, reason = "test: a failure stops the test with its message")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::serve_support::{Scratch, Server};
use bursar_testkit::Prometheus;

fn rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integrations/prometheus/bursar-alerts.yml")
}

fn promtool() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/promtool");
    p.is_file().then_some(p)
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let Some(promtool) = promtool() else {
        return bursar_testkit::need::missing("promtool (the prometheus package)", "scripts/setup.sh");
    };
    let check = Command::new(&promtool).args(["check", "rules"]).arg(rules()).output().unwrap();
    let said = String::from_utf8_lossy(&check.stdout).into_owned() + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success() && said.contains("SUCCESS: 19 rules found"), "{said}");
    let tests = rules().with_file_name("bursar-alerts.test.yml");
    let run = Command::new(&promtool).args(["test", "rules"]).arg(&tests).output().unwrap();
    let said = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success() && said.contains("SUCCESS"), "{said}");
}

/// The metric names an expression of the rules file selects (`bursar_…` ones).
fn metrics_in_rules() -> BTreeSet<String> {
    let text = std::fs::read_to_string(rules()).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines().filter_map(|l| l.trim().strip_prefix("expr:")) {
        let mut rest = line;
        while let Some(i) = rest.find("bursar_") {
            let name: String = rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &rest[i + name.len()..];
            out.insert(name);
        }
    }
    out
}

/// The family names of a text exposition (`_bucket` and the like folded into their histogram).
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn wait<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>, log: impl Fn() -> String) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_real_prometheus_loads_the_rules_scrapes_serve_and_fires_on_a_failed_reload() {
    if Prometheus::binary().is_none() {
        return bursar_testkit::need::missing("prometheus", "scripts/setup.sh");
    }
    let s = Scratch::new("alerts");
    for f in ["quota.toml", "tags.toml"] {
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies").join(f);
        std::fs::copy(from, s.policies().join(f)).unwrap();
    }
    let server = Server::start(&s, &["--no-watch"]);

    // Every bursar metric a rule selects is on serve's /metrics; the utilisation source's are
    // rendered only when it runs (serve --utilisation), so they are checked against its renderer.
    let exposition = server.get("/metrics").unwrap().text();
    let exported = families(&exposition);
    let utilisation = families(&bursar_prometheus::Counters::default().render());
    for m in metrics_in_rules() {
        let family = m.strip_suffix("_bucket").unwrap_or(&m).to_owned();
        assert!(
            exported.contains(&family) || utilisation.contains(&family),
            "the rules select `{m}`, which serve does not export:\n{exposition}"
        );
    }

    let prom = Prometheus::start_with_rules("bursar", &[server.addr], Duration::from_secs(1), &[&rules()]).unwrap();
    let plog = || format!("prometheus log:\n{}\nserve log:\n{}", prom.log(), server.log_text());
    // Every rule is loaded and evaluates against the real series without error.
    wait(
        30,
        "every rule evaluated with health ok",
        || {
            let v: serde_json::Value = serde_json::from_str(&prom.api("/api/v1/rules").ok()?).ok()?;
            let group = v["data"]["groups"].as_array()?.iter().find(|g| g["name"] == "bursar")?.clone();
            let rules = group["rules"].as_array()?;
            assert_eq!(rules.len(), 19, "{group}");
            let evaluated = rules
                .iter()
                .all(|r| r["health"] == "ok" && r["lastEvaluation"].as_str().is_some_and(|t| !t.starts_with("0001")));
            for r in rules {
                assert_ne!(r["health"], "err", "rule {} fails to evaluate: {}", r["name"], r["lastError"]);
            }
            evaluated.then_some(())
        },
        plog,
    );
    // No decision stream is open: BursarNoDecisionStream is pending (its `for` is 10 minutes),
    // which shows a rule matching serve's own series.
    let alert = |name: &str, state: &str| -> Option<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(&prom.api("/api/v1/alerts").ok()?).ok()?;
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == name && a["state"] == state)
            .cloned()
    };
    wait(30, "BursarNoDecisionStream pending", || alert("BursarNoDecisionStream", "pending"), plog);
    assert!(alert("BursarPolicyReloadFailed", "firing").is_none());

    // A policy file that does not compile: the reload fails, the alert fires, naming the instance.
    std::fs::write(s.policies().join("broken.toml"), "[[policy]]\nid = \"broken\"\nkind = \"no-such-family\"\n")
        .unwrap();
    let r = server.post("/v1/reload", "");
    assert_eq!(r.status, 422, "{}", r.text());
    let firing = wait(30, "BursarPolicyReloadFailed firing", || alert("BursarPolicyReloadFailed", "firing"), plog);
    assert_eq!(firing["labels"]["instance"], server.addr.to_string(), "{firing}");
    assert_eq!(firing["labels"]["severity"], "warning", "{firing}");
    assert_eq!(firing["labels"]["part"], "policies", "{firing}");

    // The next good reload resolves it.
    std::fs::remove_file(s.policies().join("broken.toml")).unwrap();
    let r = server.post("/v1/reload", "");
    assert_eq!(r.status, 200, "{}", r.text());
    wait(
        30,
        "BursarPolicyReloadFailed resolved",
        || alert("BursarPolicyReloadFailed", "firing").is_none().then_some(()),
        plog,
    );
}
