//! The integration docs, walked as written: `docs/notifications.md` and
//! `docs/integrations/utilisation.md` mark the blocks a site engineer copies with
//! `<!-- docs-walk: FILE -->` (write the block to FILE) and `<!-- docs-walk: run -->` (run each
//! command). This test extracts them, replaces only the example host names and directories (each
//! replacement must be used, so a renamed example fails here instead of drifting), writes the files
//! and runs the commands with the real binary against a real Alertmanager or a real Prometheus on
//! loopback, and checks that what the page promises happens: an approval reaches Alertmanager with
//! its links; a Slurm job's samples arrive from DCGM series.
//!
//! Without Debian's `prometheus` / `prometheus-alertmanager` a test is skipped, saying so, unless
//! `CI` is set (`scripts/setup.sh` installs them).

#![expect(clippy::unwrap_used, clippy::panic, reason = "integration test: a failed step fails the test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::serve_support::{Server, free_port, job_event, submit};
use bursar_testkit::{Alertmanager, FakeDcgm, FakeNode, Prometheus, TempDir, WebhookReceiver};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One marked block: where it goes (`run` for commands) and its text.
#[derive(Debug)]
struct Block {
    target: String,
    text: String,
}

/// The `<!-- docs-walk: … -->` blocks of `doc`, in order.
fn blocks(doc: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(target) = line.trim().strip_prefix("<!-- docs-walk:").and_then(|t| t.strip_suffix("-->")) else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(fence.starts_with("```"), "{doc}: a docs-walk marker must be followed by a code block, not `{fence}`");
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        out.push(Block { target: target.trim().to_owned(), text: body.join("\n") + "\n" });
    }
    out
}

/// `blocks` with every `(from, to)` replaced; each `from` must occur in some block.
fn substitute(doc: &str, blocks: &mut [Block], subs: &[(&str, String)]) {
    for (from, to) in subs {
        let mut used = false;
        for b in blocks.iter_mut() {
            used |= b.text.contains(from) || b.target.contains(from);
            b.text = b.text.replace(from, to);
            b.target = b.target.replace(from, to);
        }
        assert!(used, "{doc} no longer contains `{from}`: update the page's example or this test");
    }
}

/// Writes the file blocks and runs the command blocks: every command but `bursar serve` must exit
/// 0; `bursar serve` is started (on `listen`, its port named) and returned.
fn walk(doc: &str, blocks: &[Block], listen: &str, log: &Path) -> Server {
    let mut server = None;
    for b in blocks {
        if b.target != "run" {
            let path = Path::new(&b.target);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, &b.text).unwrap();
            continue;
        }
        for line in b.text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words[0], "bursar", "{doc}: `{line}` is not a bursar command this walk can run");
            if words.get(1) == Some(&"serve") {
                assert!(server.is_none(), "{doc}: two `bursar serve` commands");
                server = Some(start(&words[1..], listen, log));
            } else {
                let o = Command::new(env!("CARGO_BIN_EXE_bursar")).args(&words[1..]).output().unwrap();
                assert!(
                    o.status.success(),
                    "{doc}: `{line}` failed: {}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
    server.unwrap_or_else(|| panic!("{doc}: no `bursar serve` command"))
}

/// `bursar serve` with the page's arguments, on `listen` (a flag overrides the file), waited for.
fn start(args: &[&str], listen: &str, log: &Path) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(args)
        .args(["--listen", listen, "--tick", "200ms", "--log-level", "debug"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        addr: listen.parse().unwrap(),
        log: log.to_owned(),
        token: None,
        ca_file: None,
        identity: None,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.get("/v1/policies").is_ok_and(|r| r.status == 200) {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("bursar serve exited ({status}):\n{}", server.log_text());
        }
        assert!(Instant::now() < deadline, "bursar serve did not answer:\n{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// The marked blocks of `doc` for a site under `tmp`: the page's `/etc/bursar/` and
/// `/var/lib/bursar/` moved there (and made), `subs` replaced, and `policy` as the site's one policy
/// file in the configured policy directory.
fn site(doc: &str, tmp: &Path, subs: &[(&str, String)], policy: (&str, &str)) -> Vec<Block> {
    let mut b = blocks(doc);
    let mut all = vec![
        ("/etc/bursar/", format!("{}/etc/bursar/", tmp.display())),
        ("/var/lib/bursar/", format!("{}/var/lib/bursar/", tmp.display())),
    ];
    all.extend(subs.iter().cloned());
    substitute(doc, &mut b, &all);
    let policies = tmp.join("etc/bursar/policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::create_dir_all(tmp.join("var/lib/bursar")).unwrap();
    std::fs::write(policies.join(policy.0), policy.1).unwrap();
    b
}

fn skip_without(binary: Option<PathBuf>, what: &str) -> bool {
    if binary.is_some() {
        return false;
    }
    bursar_testkit::need::missing(what, "scripts/setup.sh");
    true
}

#[test]
fn notifications_md_reaches_a_real_alertmanager_as_written() {
    if skip_without(Alertmanager::binary(), "prometheus-alertmanager") {
        return;
    }
    let hook = WebhookReceiver::start().unwrap();
    let am = Alertmanager::start(&hook.url("/am")).unwrap();
    let tmp = TempDir::new("docs-walk-notify").unwrap();
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let doc = "docs/notifications.md";
    // The policies are the site's; this one holds big jobs for bob.
    let b = site(
        doc,
        tmp.path(),
        &[("http://alertmanager.example:9093", am.url()), ("https://bursar.example.org", public.clone())],
        (
            "approval.toml",
            "[[policy]]\nid = \"approval/big\"\ndescription = \"Jobs over 16 GPUs need bob's yes.\"\nkind = \"approval\"\ngpus_over = 16\napprovers = [\"bob\"]\nexpires = \"1h\"\n",
        ),
    );

    let server = walk(doc, &b, &format!("127.0.0.1:{port}"), &tmp.path().join("serve.log"));
    assert_eq!(
        server.post("/v1/admit", &submit("e1", "j-big", "nlp", 32, 2.0)).json().unwrap()["decision"],
        "require_approval"
    );
    let alert = server.wait_for(30, "the approval in Alertmanager", || {
        let alerts: Value = serde_json::from_str(&am.alerts().ok()?).ok()?;
        alerts.as_array()?.iter().find(|a| a["labels"]["bursar_job"] == "j-big").cloned()
    });
    assert_eq!(alert["labels"]["alertname"], "BursarApprovalRequired", "{alert}");
    assert_eq!(alert["labels"]["recipient"], "bob", "{alert}");
    assert!(alert["labels"].get("job").is_none(), "no `job` label to clash with Prometheus's: {alert}");
    let link = alert["annotations"]["approve_url"].as_str().unwrap_or_else(|| panic!("no approve link: {alert}"));
    assert!(link.starts_with(&format!("{public}/act/")), "the link names public_url: {link}");
    let page = server.get(link.strip_prefix(&public).unwrap()).unwrap();
    assert_eq!(page.status, 200, "the link opens its confirmation page");
    assert!(page.text().contains("Approve job j-big?"), "{}", page.text());
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
}

#[test]
fn utilisation_md_reads_a_real_prometheus_as_written() {
    if skip_without(Prometheus::binary(), "prometheus") {
        return;
    }
    let tmp = TempDir::new("docs-walk-utilisation").unwrap();
    let map = tmp.path().join("dcgm-job-map");
    let node = FakeNode::new(&tmp.path().join("driver"), &[0, 1]).unwrap();
    node.run(&root().join("integrations/slurm/prolog-dcgm.sh"), &map, "301", "0").unwrap();
    let dcgm = FakeDcgm::start("node1", 2, Some(map)).unwrap();
    dcgm.set_load(0, 0.7, 40_000.0);
    let prom = Prometheus::start(&[dcgm.addr()], Duration::from_secs(1)).unwrap();

    let doc = "docs/integrations/utilisation.md";
    let b = site(
        doc,
        tmp.path(),
        &[
            ("http://prometheus.example:9090", prom.url()),
            // The page's pace is a site's; a test's is seconds.
            ("interval = \"30s\"", "interval = \"1s\"".to_owned()),
            ("lag = \"30s\"", "lag = \"1s\"".to_owned()),
            ("max_age = \"2m\"", "max_age = \"3s\"".to_owned()),
        ],
        (
            "reclaim.toml",
            "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"Alert after 1h under 10 %.\"\nkind = \"reclaim\"\n[policy.idle]\nbelow = 0.10\nwindow = \"1h\"\ngrace = \"1h\"\n",
        ),
    );

    let server = walk(doc, &b, &format!("127.0.0.1:{}", free_port()), &tmp.path().join("serve.log"));
    assert_eq!(server.post("/v1/admit", &submit("s1", "lab-train", "nlp", 1, 1.0)).status, 200);
    // What `bursar slurm watch --cluster lab` sends when Slurm starts job 301.
    let started = job_event(
        "slurm-lab-301-started",
        "job.started",
        "lab-train",
        r#","slurm_job_id":"301","slurm_cluster":"lab""#,
    );
    assert_eq!(server.post("/v1/events", &started).status, 200);
    let u = server.wait_for(40, "samples of lab-train", || {
        let v = server.get_json("/v1/jobs/lab-train");
        (v["utilisation"]["samples"].as_u64().unwrap_or(0) >= 2).then(|| v["utilisation"].clone())
    });
    let util = u["gpu_util"].as_f64().unwrap();
    assert!((util - 0.7).abs() < 0.01, "the DCGM load arrives as the job's utilisation: {u}");
    assert!(u["no_sample"].is_null(), "{u}");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
}
