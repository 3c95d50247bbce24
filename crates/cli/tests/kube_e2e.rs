//! bursar on a Kueue cluster, end to end: the real `bursar serve` and the real `bursar kube checks`,
//! `watch` and `enforce` (kube-rs 5 with k8s-openapi for Kubernetes 1.33) against the in-test API
//! server of `bursar_testkit::kubeapi` (objects from the Kubernetes 1.33 and Kueue v0.13
//! `kueue.x-k8s.io/v1beta1` API references), each agent held to the ClusterRole
//! `integrations/kubernetes/kueue.yaml` grants it, and a real Prometheus (Debian's) scraping a
//! dcgm-exporter stand-in whose GPUs carry the `namespace`/`pod` labels of the pods holding them.
//!
//! A Workload is denied (its check `Rejected` with bursar's reason); another is held for approval
//! (its check stays `Pending`, "waiting for approval", the first status write racing a change of
//! the Workload and getting a real `409 Conflict`), approved by bob (check `Ready` through the
//! enforcer), admitted and run on two pods (`job.started` with the 4 GPUs they hold), found idle
//! from dcgm-exporter's series in Prometheus (alert, then reclaim), deactivated by the enforcer
//! (`spec.active: false`) and finished as cancelled when Kueue evicts it. A third is preempted
//! (`job.requeued`) and runs again (a second run). Meanwhile the watcher is
//! killed (-9) and restarted, the API server compacts its history and breaks every watch (410 Gone,
//! relist), and a watch broken after a bookmark resumes from the bookmark's version. Every decision
//! and action is in the audit log, once.
//!
//! A Workload of MIG slices (2 × `nvidia.com/mig-1g.10gb`) is judged as 2/7 of a GPU of the
//! flavor Kueue assigned to its slices, and a cap of one GPU refuses a second that would hold 8/7.
//!
//! Without `/usr/bin/prometheus` the first test is skipped, unless `CI` is set (`scripts/setup.sh`
//! installs it).

#![expect(clippy::unwrap_used, reason = "integration test helpers: a failed step fails the test")]

use std::time::Duration;

use crate::kube_support::{Agent, Cluster, job_id, principals, token, unix_now};
use crate::serve_support::{Scratch, Server};
use bursar_testkit::kubeapi::{ADMISSION_CHECKS, KubeApi, RESOURCE_FLAVORS, WORKLOADS};
use bursar_testkit::{FakeDcgm, Prometheus};
use serde_json::{Value, json};

const POLICIES: &str = r#"
[[policy]]
id = "approval/big"
description = "Jobs over 2 GPUs need bob's approval."
kind = "approval"
gpus_over = 2
approvers = ["bob"]
expires = "1h"

[[policy]]
id = "readiness/all-ready"
description = "Deny GPU jobs whose image, data or scripts are not declared ready."
kind = "readiness"
require = ["image", "data", "script"]
action = "deny"

[[policy]]
id = "reclaim/idle"
description = "Alert after 4 s under 10 % (3 samples at least), reclaim 4 s later without a keepalive."
kind = "reclaim"

[policy.idle]
below = 0.10
window = "4s"
grace = "4s"
min_samples = 3
"#;

const CLUSTER: &str = "gpu-a";

fn audit_events(s: &Scratch) -> Vec<(String, String, Value)> {
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    log.events_since(0, 100_000)
        .unwrap()
        .into_iter()
        .map(|e| (e.event_id.clone(), e.kind.clone(), serde_json::from_str(&e.raw).unwrap_or(Value::Null)))
        .collect()
}

fn event<'a>(events: &'a [(String, String, Value)], id: &str) -> Option<&'a Value> {
    events.iter().find(|(i, _, _)| i == id).map(|(_, _, v)| v)
}

fn agent_args(
    cluster: &Cluster,
    user: &str,
    principal: &str,
    server: &Server,
    dir: &std::path::Path,
    extra: &[&str],
) -> Vec<String> {
    let token_file = dir.join(format!("{principal}.token"));
    std::fs::write(&token_file, token(principal)).unwrap();
    let mut args: Vec<String> = vec![
        "--cluster".into(),
        CLUSTER.into(),
        "--kubeconfig".into(),
        cluster.kubeconfig(user).display().to_string(),
        "--server".into(),
        server.addr.to_string(),
        "--token-file".into(),
        token_file.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

#[test]
fn a_workload_is_held_approved_run_found_idle_and_reclaimed_by_deactivation() {
    if Prometheus::binary().is_none() {
        bursar_testkit::need::missing("prometheus", "scripts/setup.sh");
        return;
    }
    let s = Scratch::new("kube-e2e");
    let dir = s.0.clone();
    let dcgm = FakeDcgm::start("node1", 4, None).unwrap();
    for g in 0..4 {
        dcgm.set_load(g, 0.02, 20_000.0);
    }
    let prom = Prometheus::start(&[dcgm.addr()], Duration::from_secs(1)).unwrap();

    let cluster = Cluster::start(
        &dir,
        "kueue.yaml",
        &[("checks", "bursar-kube-checks"), ("watch", "bursar-kube-watch"), ("enforce", "bursar-kube-enforce")],
    );
    let api = &cluster.api;
    api.create(
        ADMISSION_CHECKS,
        "",
        json!({"metadata": {"name": "bursar"}, "spec": {"controllerName": "bursar.dev/admission-check"}}),
    )
    .unwrap();
    api.create(ADMISSION_CHECKS, "", json!({"metadata": {"name": "provisioning"}, "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}})).unwrap();
    api.create(RESOURCE_FLAVORS, "", json!({"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}})).unwrap();

    s.write_policy("policies.toml", POLICIES);
    let config = dir.join("bursar.toml");
    std::fs::write(
        &config,
        principals(&[
            ("kube-checks", &["scheduler"], "gpu-a-*"),
            ("kube-agents", &["producer", "reader"], "gpu-a-*"),
            ("bob", &["approver"], ""),
            ("reader", &["reader"], ""),
        ]),
    )
    .unwrap();
    let util = dir.join("utilisation.toml");
    std::fs::write(
        &util,
        format!(
            "[prometheus]\nserver = \"{}\"\ninterval = \"1s\"\nlag = \"1s\"\nmax_age = \"3s\"\ntimeout = \"2s\"\n\n[jobs]\nkeys = \"kubernetes\"\nkube_cluster = \"{CLUSTER}\"\n",
            prom.url()
        ),
    )
    .unwrap();
    let mut server = Server::start(
        &s,
        &["--config", config.to_str().unwrap(), "--utilisation", util.to_str().unwrap(), "--tick", "200ms"],
    );
    server.token = Some(token("reader"));

    let mut checks = Agent::start(&dir, "checks", &{
        let mut a = vec!["checks".to_owned()];
        a.extend(agent_args(&cluster, "checks", "kube-checks", &server, &dir, &["--resync", "500ms"]));
        a
    });
    let watch_args = {
        let mut a = vec!["watch".to_owned()];
        let state = dir.join("watch.json");
        a.extend(agent_args(
            &cluster,
            "watch",
            "kube-agents",
            &server,
            &dir,
            &["--state", state.to_str().unwrap(), "--resync", "200ms", "--settle", "30s"],
        ));
        a
    };
    let watch = Agent::start(&dir, "watch", &watch_args);
    let mut enforce = Agent::start(&dir, "enforce", &{
        let mut a = vec!["enforce".to_owned()];
        let state = dir.join("enforce.json");
        a.extend(agent_args(
            &cluster,
            "enforce",
            "kube-agents",
            &server,
            &dir,
            &["--state", state.to_str().unwrap(), "--retry-delay", "100ms"],
        ));
        a
    });

    // The controller marks its AdmissionCheck Active (and not the other controller's).
    cluster.wait(30, "the AdmissionCheck active", &[&checks], |api| {
        let ac = api.get(ADMISSION_CHECKS, "", "bursar")?;
        (ac.pointer("/status/conditions/0/type")? == "Active" && ac.pointer("/status/conditions/0/status")? == "True")
            .then_some(())
    });
    assert!(
        api.get(ADMISSION_CHECKS, "", "provisioning").unwrap().get("status").is_none(),
        "another controller's check is left alone"
    );

    // Not ready: denied, the check Rejected with bursar's reason.
    let (unready, unready_uid) =
        cluster.submit_workload("nlp", "unready", 1, 1, json!({"bursar.dev/user": "alice"}), json!({}));
    cluster.reserve_quota("nlp", &unready, 1);
    let (state, message) = cluster.wait(30, "the unready Workload rejected", &[&checks], |_| {
        cluster.check("nlp", &unready, "bursar").filter(|(s, _)| s != "Pending")
    });
    assert_eq!(state, "Rejected", "{message}");
    assert!(message.starts_with("bursar: ") && message.contains("ready"), "{message}");
    assert_eq!(cluster.check("nlp", &unready, "provisioning").unwrap().0, "Ready", "Kueue's other check is untouched");

    // Four GPUs: held for bob. The controller's first status write races a change of the Workload.
    let (train, train_uid) = cluster.submit_workload(
        "nlp",
        "train",
        2,
        2,
        json!({"bursar.dev/user": "alice", "tags.bursar.dev/team": "search"}),
        json!({"bursar.dev/ready": "image,data,script", "bursar.dev/stage": "finetune"}),
    );
    let job = job_id(CLUSTER, &train_uid);
    api.conflict_next_write(WORKLOADS, "nlp", &train);
    cluster.reserve_quota("nlp", &train, 2);
    let (_, message) = cluster.wait(30, "the Workload held for approval", &[&checks], |_| {
        cluster.check("nlp", &train, "bursar").filter(|(_, m)| !m.is_empty())
    });
    assert!(message.starts_with("bursar: waiting for approval: "), "{message}");
    assert_eq!(cluster.check("nlp", &train, "bursar").unwrap().0, "Pending");
    // The in-test server records a request once it has applied it, so the write a read just saw may
    // be recorded a moment later (it failed that way once under the whole suite's load).
    let status_writes = |api: &KubeApi| -> Vec<_> {
        api.seen()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.target.contains(&format!("/workloads/{train}/status")))
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !status_writes(api).iter().any(|r| r.status == 200) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status_writes = status_writes(api);
    assert_eq!(status_writes.first().map(|r| r.status), Some(409), "the racing write is refused: {status_writes:?}");
    assert!(status_writes.iter().any(|r| r.status == 200), "then written on a fresh read: {status_writes:?}");
    assert!(status_writes.iter().all(|r| r.content_type == "application/apply-patch+yaml"
        && r.target.contains("fieldManager=bursar-admission-check")));

    // bob approves; the enforcer sets the check Ready.
    let bob = bursar_http::Client::plain(server.addr, bursar_http::Auth::bearer(Some(&token("bob"))), None);
    let r = bursar_client::Conn::over(bob)
        .request("POST", &format!("/v1/jobs/{job}/approve"), b"{\"reason\":\"fits\"}")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let (state, message) = cluster.wait(30, "the check Ready after the approval", &[&enforce], |_| {
        cluster.check("nlp", &train, "bursar").filter(|(s, _)| s == "Ready")
    });
    assert!(message.starts_with("bursar: approved"), "{state}: {message}");

    // Kueue admits; the Job's two pods are bound; dcgm-exporter shows their GPUs idle.
    cluster.admit("nlp", &train, "train");
    let t0 = unix_now();
    cluster.run_pod("nlp", "train", "train-0-x7k2p", 2, t0);
    cluster.run_pod("nlp", "train", "train-1-q9m4z", 2, t0 + 1);
    dcgm.set_pod(0, Some(("nlp", "train-0-x7k2p", "trainer")));
    dcgm.set_pod(1, Some(("nlp", "train-0-x7k2p", "trainer")));
    dcgm.set_pod(2, Some(("nlp", "train-1-q9m4z", "trainer")));
    dcgm.set_pod(3, Some(("nlp", "train-1-q9m4z", "trainer")));
    let started_id = format!("kube-agents:{job}-r1-started");
    let started = server.wait_for(30, "job.started", || event(&audit_events(&s), &started_id).cloned());
    assert_eq!(started["gpus"], 4, "what the pods hold: {started}");
    assert_eq!(started["kube_pods"], json!(["train-0-x7k2p", "train-1-q9m4z"]));
    assert_eq!(started["time"], bursar_testkit::kubeapi::rfc3339(t0), "the first binding");

    // A second Workload is preempted: its run ends requeued (the pods' end), and its next run is a
    // new one.
    let (evictee, evictee_uid) = cluster.submit_workload(
        "nlp",
        "evictee",
        1,
        1,
        json!({"bursar.dev/user": "alice"}),
        json!({"bursar.dev/ready": "image,data,script"}),
    );
    let evictee_job = job_id(CLUSTER, &evictee_uid);
    cluster.reserve_quota("nlp", &evictee, 1);
    cluster.wait(30, "the evictee allowed", &[&checks], |_| {
        cluster.check("nlp", &evictee, "bursar").filter(|(s, _)| s == "Ready")
    });
    cluster.admit("nlp", &evictee, "evictee");
    cluster.run_pod("nlp", "evictee", "evictee-b7x2q", 1, unix_now());
    server.wait_for(30, "the evictee started", || {
        event(&audit_events(&s), &format!("kube-agents:{evictee_job}-r1-started")).cloned()
    });
    cluster.evict("nlp", &evictee, "evictee", "Preempted", &["evictee-b7x2q"]);
    let requeued = server.wait_for(30, "job.requeued", || {
        event(&audit_events(&s), &format!("kube-agents:{evictee_job}-r1-requeued")).cloned()
    });
    assert_eq!(
        (requeued["type"].as_str(), requeued["kube_reason"].as_str()),
        (Some("job.requeued"), Some("Preempted"))
    );

    // While it waits: the watcher is killed and restarted, the API server compacts and breaks every
    // watch. Nothing is sent twice, nothing is lost.
    watch.kill9();
    api.compact_and_break_watches();
    let watch = Agent::start(&dir, "watch", &watch_args);

    // Kueue requeues it and reserves quota again (its checks reset to Pending): asked again, serve
    // answers with its first decision (the same submission), and the second run starts.
    cluster.requeue("nlp", &evictee);
    // Waiting again, it says why in Kueue's words (issue 53): its QuotaReserved condition is false.
    let waits = server.wait_for(30, "why it waits", || {
        event(&audit_events(&s), &format!("kube-agents:{evictee_job}-waits-1")).cloned()
    });
    assert_eq!((waits["type"].as_str(), waits["reason"].as_str()), (Some("job.queued"), Some("Pending: Pending")));
    cluster.reserve_quota("nlp", &evictee, 1);
    cluster.wait(30, "the evictee allowed again", &[&checks], |_| {
        cluster.check("nlp", &evictee, "bursar").filter(|(s, _)| s == "Ready")
    });
    cluster.admit("nlp", &evictee, "evictee");
    cluster.run_pod("nlp", "evictee", "evictee-k4m9w", 1, unix_now());
    let second = server.wait_for(30, "the evictee's second run", || {
        event(&audit_events(&s), &format!("kube-agents:{evictee_job}-r2-started")).cloned()
    });
    assert_eq!(second["kube_pods"], json!(["evictee-k4m9w"]));

    // Idle on every GPU: alerted, then reclaimed; the enforcer deactivates the Workload.
    let decisions_of = |kind: &str| {
        server
            .decisions(0)
            .into_iter()
            .filter(|d| d["job_id"] == job.as_str() && d["decision"] == kind)
            .collect::<Vec<_>>()
    };
    server.wait_for(60, "the idle alert", || {
        decisions_of("alert").into_iter().find(|d| d["policies"][0] == "reclaim/idle")
    });
    let reclaim = server.wait_for(60, "the idle reclaim", || decisions_of("reclaim").into_iter().next());
    cluster.wait(30, "the Workload deactivated", &[&enforce], |api| {
        (api.get(WORKLOADS, "nlp", &train)?.pointer("/spec/active")? == false).then_some(())
    });
    // Kueue evicts the deactivated Workload; its pods go.
    cluster.evict("nlp", &train, "train", "InactiveWorkload", &["train-0-x7k2p", "train-1-q9m4z"]);
    let finished_id = format!("kube-agents:{job}-r1-finished");
    let finished = server.wait_for(30, "job.finished", || event(&audit_events(&s), &finished_id).cloned());
    assert_eq!(
        (finished["status"].as_str(), finished["kube_reason"].as_str()),
        (Some("cancelled"), Some("InactiveWorkload"))
    );

    // The audit log holds every decision and action, once.
    let events = audit_events(&s);
    let ids: Vec<&str> = events.iter().map(|(i, _, _)| i.as_str()).collect();
    for id in [
        format!("kube-checks:{job}-submitted"),
        format!("kube-agents:{job}-queued"),
        started_id.clone(),
        finished_id.clone(),
        format!("kube-agents:{evictee_job}-r1-requeued"),
        format!("kube-agents:{evictee_job}-r2-started"),
    ] {
        assert_eq!(ids.iter().filter(|i| **i == id).count(), 1, "{id} once: {ids:?}");
    }
    let denied = job_id(CLUSTER, &unready_uid);
    let all = server.decisions(0);
    let admission = |j: &str| {
        all.iter()
            .filter(|d| d["job_id"] == j && d["admission"] == true)
            .map(|d| d["decision"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(admission(&denied), ["deny"]);
    assert_eq!(admission(&job), ["require_approval", "allow"], "held, then approved");
    let actions: Vec<&Value> =
        events.iter().filter(|(i, _, _)| i.starts_with("kube-agents:kube-")).map(|(_, _, v)| v).collect();
    let action =
        |decision: &str| actions.iter().find(|a| a["decision"] == decision && a["job_id"] == job.as_str()).copied();
    let approved = action("allow").unwrap_or_else(|| panic!("no action record of the approval: {actions:?}"));
    assert_eq!(
        (approved["type"].as_str(), approved["action"].as_str()),
        (Some("action.executed"), Some("check ready"))
    );
    let reclaimed = action("reclaim").unwrap_or_else(|| panic!("no action record of the reclaim: {actions:?}"));
    assert_eq!(reclaimed["action"], "deactivate");
    assert_eq!(reclaimed["decision_id"], reclaim["decision_id"]);
    assert_eq!(reclaimed["kube_name"], train.as_str());

    // The watcher relisted after the 410 and saw bookmarks; no agent asked for a verb its
    // ClusterRole does not grant.
    let seen = api.seen();
    let workload_lists =
        seen.iter().filter(|r| r.user == "watch" && r.verb == "list" && r.target.contains("/workloads")).count();
    assert!(workload_lists >= 2, "a list at the start of each watcher");
    assert!(
        seen.iter().any(|r| r.user == "watch" && r.verb == "watch" && r.target.contains("allowWatchBookmarks=true"))
    );
    // Bookmarks move the resume point. A write to a kind the watcher does not follow moves the
    // version past every pod's; once a bookmark of that version reached its pods watch (they come
    // every 300 ms), every watch is broken: the pods watch resumes from the bookmark's version,
    // which no pod event carried.
    let mark = api.create(RESOURCE_FLAVORS, "", json!({"metadata": {"name": "a100"}, "spec": {}})).unwrap();
    let mark: u64 = mark["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    cluster.wait(20, "a bookmark on the watcher's pods watch", &[&watch], |api| {
        api.bookmarks().into_iter().find(|b| b.user == "watch" && b.resource == "pods" && b.version >= mark)
    });
    api.disconnect_watches();
    let resumed_from = |target: &str| {
        let (_, rest) = target.split_once("resourceVersion=")?;
        rest.split('&').next()?.parse::<u64>().ok()
    };
    cluster.wait(20, "the pods watch resumed from a bookmark", &[&watch], |api| {
        api.seen().into_iter().find(|r| {
            r.user == "watch"
                && r.verb == "watch"
                && r.target.starts_with("/api/v1/pods?")
                && resumed_from(&r.target).is_some_and(|v| v >= mark)
        })
    });
    assert!(
        checks.log_text().contains("410 Gone; listing again"),
        "the checks controller's broken watches resumed from a compacted version and listed again:\n{}",
        checks.log_text()
    );
    assert!(cluster.forbidden().is_empty(), "requests outside the manifests' ClusterRoles: {:?}", cluster.forbidden());
    checks.assert_running();
    enforce.assert_running();
    let _ = denied;
    drop(prom);
}

/// MIG slices with Kueue (issue 55, item 7; no Prometheus needed): a Workload of 2 ×
/// `nvidia.com/mig-1g.10gb`, its quota reserved on the flavor Kueue assigned to the slices, is
/// judged as 2/7 of a GPU of that flavor's model and admitted (`Ready`); under a cap of one GPU per
/// project, a second asking for six more slices (8/7 in all) is `Rejected`.
#[test]
fn a_workload_of_mig_slices_is_judged_on_their_share_and_their_flavor() {
    let s = Scratch::new("kube-e2e-mig");
    let dir = s.0.clone();
    let cluster = Cluster::start(&dir, "kueue.yaml", &[("checks", "bursar-kube-checks")]);
    let api = &cluster.api;
    api.create(
        ADMISSION_CHECKS,
        "",
        json!({"metadata": {"name": "bursar"}, "spec": {"controllerName": "bursar.dev/admission-check"}}),
    )
    .unwrap();
    api.create(RESOURCE_FLAVORS, "", json!({"metadata": {"name": "a100-mig"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}})).unwrap();
    s.write_policy(
        "policies.toml",
        "[[policy]]\nid = \"quota/one-gpu\"\ndescription = \"A project holds at most one GPU at once.\"\nkind = \"quota\"\nmax_gpus = 1\n",
    );
    let config = dir.join("bursar.toml");
    std::fs::write(&config, principals(&[("kube-checks", &["scheduler"], "gpu-a-*"), ("reader", &["reader"], "")]))
        .unwrap();
    let mut server = Server::start(&s, &["--config", config.to_str().unwrap()]);
    server.token = Some(token("reader"));
    let checks = Agent::start(&dir, "checks", &{
        let mut a = vec!["checks".to_owned()];
        a.extend(agent_args(&cluster, "checks", "kube-checks", &server, &dir, &["--resync", "500ms"]));
        a
    });
    let slices = |n: u32| json!({"nvidia.com/mig-1g.10gb": n.to_string()});
    let judged = |wl: &str| {
        cluster.wait(30, "the Workload judged", &[&checks], |_| {
            cluster.check("nlp", wl, "bursar").filter(|(state, _)| state != "Pending")
        })
    };

    let (two, two_uid) = cluster.submit_workload_with("nlp", "two", 1, slices(2), json!({}), json!({}));
    cluster.reserve_quota_on("nlp", &two, 1, json!({"cpu": "default", "nvidia.com/mig-1g.10gb": "a100-mig"}));
    let (state, message) = judged(&two);
    assert_eq!(state, "Ready", "{message}");
    let job = job_id(CLUSTER, &two_uid);
    let events = audit_events(&s);
    let submitted = event(&events, &format!("kube-checks:{job}-submitted")).unwrap();
    assert_eq!(
        (submitted["job"]["gpus"].as_str(), submitted["job"]["gpu_type"].as_str()),
        (Some("2/7"), Some("NVIDIA-A100-SXM4-80GB")),
        "{submitted}"
    );
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], "2/7");

    let (six, _) = cluster.submit_workload_with("nlp", "six", 1, slices(6), json!({}), json!({}));
    cluster.reserve_quota_on("nlp", &six, 1, json!({"nvidia.com/mig-1g.10gb": "a100-mig"}));
    let (state, message) = judged(&six);
    assert_eq!(state, "Rejected", "{message}");
    assert!(message.contains("over its cap of 1"), "{message}");
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], "2/7");
    assert!(cluster.forbidden().is_empty(), "requests outside the manifests' ClusterRoles: {:?}", cluster.forbidden());
}
