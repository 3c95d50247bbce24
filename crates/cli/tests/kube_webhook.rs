//! bursar on a cluster without Kueue: the real `bursar kube webhook` answers real `AdmissionReview`
//! v1 requests (as kube-apiserver 1.33 sends them, JSON over TLS with a certificate of a CA made
//! here, the patch applied as the API server applies it), and the real `bursar kube watch` and
//! `enforce --kind batch/v1/Job` follow the Jobs it admitted in the in-test API server, each held to
//! its ClusterRole in `integrations/kubernetes/webhook.yaml`.
//!
//! A small Job is admitted and labelled with its bursar job (so are its pods), runs and completes
//! (`job.started` with its GPUs, `job.finished` succeeded); a big one is created suspended and held,
//! its creator cannot resume it (refused by the webhook), bob approves and the enforcer resumes it;
//! it runs past its maximum runtime (5 s) and the enforcer suspends it (`bursar.dev/reclaimed`), which
//! finishes its run as cancelled. A Job not declared ready is refused with bursar's reason; a dry
//! run is answered without a submission; a body that is not an AdmissionReview is a 400; with serve
//! unreachable the webhook refuses (fail closed), or admits with a warning under `--fail-open`.
//!
//! MIG slices (issue 55, item 7): a Job asking for 2 × `nvidia.com/mig-1g.10gb` is submitted,
//! decided, held and started as 2/7 of a GPU; under a cap of one GPU per project seven slices fit and
//! the eighth is refused.

#![expect(clippy::unwrap_used, clippy::panic, reason = "integration test helpers: a failed step fails the test")]

use std::path::Path;
use std::time::{Duration, Instant};

use crate::kube_support::{Agent, Cluster, principals, token, unix_now};
use crate::serve_support::{Scratch, Server};
use bursar_testkit::kubeapi::{JOBS, PODS, rfc3339};
use bursar_testkit::tls::TestCa;
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
id = "reclaim/runtime"
description = "Release a job still running 5 s after its start."
kind = "reclaim"
max_runtime = "5s"
"#;

const CLUSTER: &str = "gpu-a";
const ENFORCER: &str = "system:serviceaccount:bursar:bursar-kube-enforce";

/// A Job as a user writes it.
fn job(name: &str, gpus: u32, ready: bool) -> Value {
    let mut ann = json!({"bursar.dev/stage": "finetune", "bursar.dev/job": "forged"});
    if ready {
        ann["bursar.dev/ready"] = json!("image,data,script");
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "nlp", "annotations": ann, "labels": {"tags.bursar.dev/team": "search"}},
        "spec": {"parallelism": 1, "completions": 1, "activeDeadlineSeconds": 3600,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "registry.example/llm:1.4",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}})
}

/// An AdmissionReview v1 request, as kube-apiserver sends it.
fn review(uid: &str, operation: &str, object: &Value, old: &Value, user: &str, dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid,
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "requestKind": {"group": "batch", "version": "v1", "kind": "Job"},
            "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": object["metadata"]["name"], "namespace": "nlp", "operation": operation,
            "userInfo": {"username": user, "uid": "u-1", "groups": ["system:authenticated"]},
            "object": object, "oldObject": old, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": if operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" }}}
    }))
    .unwrap()
}

struct Webhook {
    /// The process, stopped on drop.
    _agent: Agent,
    client: bursar_http::Client,
}

impl Webhook {
    fn start(dir: &Path, name: &str, ca_file: &Path, cert: &Path, key: &Path, server: &str, extra: &[&str]) -> Webhook {
        let port_file = dir.join(format!("{name}.port"));
        let token_file = dir.join("kube-webhook.token");
        std::fs::write(&token_file, token("kube-webhook")).unwrap();
        let mut args: Vec<String> = [
            "webhook",
            "--cluster",
            CLUSTER,
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            port_file.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--kind",
            "batch/v1/Job",
            "--kind",
            "v1/Pod",
            "--agent-user",
            ENFORCER,
            "--timeout",
            "2s",
            "--server",
            server,
            "--token-file",
            token_file.to_str().unwrap(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let mut agent = Agent::start(dir, name, &args);
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&port_file).ok().and_then(|t| t.trim().parse::<u16>().ok()) {
                break p;
            }
            agent.assert_running();
            assert!(Instant::now() < deadline, "the webhook did not start:\n{}", agent.log_text());
            std::thread::sleep(Duration::from_millis(25));
        };
        let client = bursar_http::Client::new(bursar_http::ClientConfig {
            ca_file: Some(ca_file.to_owned()),
            ..bursar_http::ClientConfig::new(format!("https://127.0.0.1:{port}"))
        })
        .unwrap();
        let health = client.get("/healthz").unwrap();
        assert_eq!((health.status, health.text().trim()), (200, "ok"));
        Webhook { _agent: agent, client }
    }

    /// POSTs a review; the HTTP status and the AdmissionReview answered.
    fn ask(&self, body: &[u8]) -> (u16, Value) {
        let r = self.client.post("/mutate", "application/json", body).unwrap();
        (r.status, r.json().unwrap_or(Value::Null))
    }
}

/// The object after the answer's JSON patch, as the API server applies it (the patch is bytes: a
/// base64 string, or the array of numbers kube-rs writes, both of which Go's JSON decoder reads).
fn patched(object: &Value, answer: &Value) -> Value {
    let bytes: Vec<u8> = match &answer["response"]["patch"] {
        Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
        Value::Null => return object.clone(),
        other => panic!("a patch that is not bytes: {other}"),
    };
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    out
}

fn audit_ids(s: &Scratch) -> Vec<(String, Value)> {
    let log = bursar_audit::AuditLog::open_read(s.audit()).unwrap();
    log.events_since(0, 100_000)
        .unwrap()
        .into_iter()
        .map(|e| (e.event_id, serde_json::from_str(&e.raw).unwrap_or(Value::Null)))
        .collect()
}

#[test]
fn the_webhook_admits_holds_and_refuses_and_the_agents_follow_its_jobs() {
    let s = Scratch::new("kube-webhook");
    let dir = s.0.clone();
    let ca = TestCa::new("webhook test CA").unwrap();
    let ca_file = ca.write(&dir, "ca").unwrap();
    let (cert, key) = ca.server().unwrap().write(&dir, "webhook").unwrap();
    let cluster = Cluster::start(
        &dir,
        "webhook.yaml",
        &[("watch", "bursar-kube-watch-objects"), ("enforce", "bursar-kube-enforce-objects")],
    );
    let api = &cluster.api;

    s.write_policy("policies.toml", POLICIES);
    let config = dir.join("bursar.toml");
    std::fs::write(
        &config,
        principals(&[
            ("kube-webhook", &["scheduler"], "gpu-a-*"),
            ("kube-agents", &["producer", "reader"], "gpu-a-*"),
            ("bob", &["approver"], ""),
            ("reader", &["reader"], ""),
        ]),
    )
    .unwrap();
    let mut server = Server::start(&s, &["--config", config.to_str().unwrap(), "--tick", "200ms"]);
    server.token = Some(token("reader"));
    let addr = server.addr.to_string();
    let hook = Webhook::start(&dir, "webhook", &ca_file, &cert, &key, &addr, &[]);

    let agents_token = dir.join("kube-agents.token");
    std::fs::write(&agents_token, token("kube-agents")).unwrap();
    let agent = |name: &str, user: &str, extra: &[&str]| {
        let mut args: Vec<String> =
            vec![name.into(), "--cluster".into(), CLUSTER.into(), "--kind".into(), "batch/v1/Job".into()];
        args.extend([
            "--kubeconfig".into(),
            cluster.kubeconfig(user).display().to_string(),
            "--server".into(),
            addr.clone(),
        ]);
        args.extend(["--token-file".into(), agents_token.display().to_string()]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Agent::start(&dir, name, &args)
    };
    let watch_state = dir.join("watch.json");
    let watch =
        agent("watch", "watch", &["--state", watch_state.to_str().unwrap(), "--resync", "200ms", "--settle", "30s"]);
    let enforce_state = dir.join("enforce.json");
    let mut enforce =
        agent("enforce", "enforce", &["--state", enforce_state.to_str().unwrap(), "--retry-delay", "100ms"]);

    // A small Job: admitted as alice, labelled with its bursar job, a forged mark replaced.
    let small = job("small", 1, true);
    let (status, answer) = hook.ask(&review("req-small-1", "CREATE", &small, &Value::Null, "alice", false));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(
        (answer["response"]["uid"].as_str(), answer["response"]["allowed"].as_bool()),
        (Some("req-small-1"), Some(true)),
        "{answer}"
    );
    let small_job = bursar_kube::submit::job_id(CLUSTER, "req-small-1");
    let admitted = patched(&small, &answer);
    assert_eq!(admitted["metadata"]["annotations"]["bursar.dev/job"], small_job.as_str());
    assert_eq!(admitted["spec"]["template"]["metadata"]["labels"]["bursar.dev/job"], small_job.as_str());
    let submitted = audit_ids(&s)
        .into_iter()
        .find(|(i, _)| *i == format!("kube-webhook:{small_job}-submitted"))
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(submitted["job"]["user"], "alice", "userInfo is the user");
    assert_eq!(submitted["job"]["requested_hours"], 1.0, "from activeDeadlineSeconds");
    // The API server stores it; its pod runs and the Job completes.
    api.create(JOBS, "nlp", admitted).unwrap();
    let t0 = unix_now();
    cluster.run_pod("nlp", "small", "small-abcde", 1, t0);
    let started = server.wait_for(30, "the small job started", || {
        audit_ids(&s).into_iter().find(|(i, _)| *i == format!("kube-agents:{small_job}-r1-started")).map(|(_, v)| v)
    });
    assert_eq!((started["gpus"].as_u64(), started["kube_kind"].as_str()), (Some(1), Some("Job")));
    let end = rfc3339(t0 + 2);
    cluster.update(PODS, "nlp", "small-abcde", true, json!({"status": {"phase": "Succeeded"}}));
    cluster.update(JOBS, "nlp", "small", true, json!({"status": {"completionTime": end, "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": end}]}}));
    let finished = server.wait_for(30, "the small job finished", || {
        audit_ids(&s).into_iter().find(|(i, _)| *i == format!("kube-agents:{small_job}-r1-finished")).map(|(_, v)| v)
    });
    assert_eq!((finished["status"].as_str(), finished["time"].as_str()), (Some("succeeded"), Some(end.as_str())));

    // Not ready: refused with bursar's reason.
    let (_, answer) =
        hook.ask(&review("req-unready", "CREATE", &job("unready", 1, false), &Value::Null, "alice", false));
    assert_eq!(answer["response"]["allowed"], false);
    let message = answer["response"]["status"]["message"].as_str().unwrap_or("");
    assert!(message.starts_with("bursar: ") && message.contains("ready"), "{answer}");

    // A dry run gets what serve would decide, and nothing is submitted: a job bursar would refuse is
    // refused, one it would admit is allowed.
    let (_, answer) = hook.ask(&review("req-dry", "CREATE", &job("dry", 1, true), &Value::Null, "alice", true));
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let (_, answer) =
        hook.ask(&review("req-dry-unready", "CREATE", &job("dry-unready", 1, false), &Value::Null, "alice", true));
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert!(answer["response"]["status"]["message"].as_str().unwrap_or("").contains("ready"), "{answer}");
    for uid in ["req-dry", "req-dry-unready"] {
        assert!(
            !audit_ids(&s).iter().any(|(i, _)| i.contains(&bursar_kube::submit::job_id(CLUSTER, uid))),
            "a dry run submitted a job"
        );
    }

    // Four GPUs: created suspended and held for bob.
    let big = job("big", 4, true);
    let (_, answer) = hook.ask(&review("req-big-1", "CREATE", &big, &Value::Null, "alice", false));
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(answer["response"]["warnings"][0].as_str().unwrap_or("").contains("held for approval"), "{answer}");
    let held = patched(&big, &answer);
    assert_eq!(
        (held["spec"]["suspend"].as_bool(), held["metadata"]["annotations"]["bursar.dev/hold"].as_str()),
        (Some(true), Some("approval"))
    );
    api.create(JOBS, "nlp", held.clone()).unwrap();
    let big_job = bursar_kube::submit::job_id(CLUSTER, "req-big-1");
    // alice cannot resume it herself.
    let mut resumed = held.clone();
    resumed["spec"]["suspend"] = json!(false);
    let (_, answer) = hook.ask(&review("req-big-2", "UPDATE", &resumed, &held, "alice", false));
    assert_eq!(answer["response"]["allowed"], false);
    assert!(
        answer["response"]["status"]["message"].as_str().unwrap_or("").contains("bursar holds this Job"),
        "{answer}"
    );
    // bob approves: the enforcer resumes it.
    let bob = bursar_http::Client::plain(server.addr, bursar_http::Auth::bearer(Some(&token("bob"))), None);
    let r = bursar_client::Conn::over(bob).request("POST", &format!("/v1/jobs/{big_job}/approve"), b"{}").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    cluster.wait(30, "the big Job resumed", &[&enforce], |api| {
        let j = api.get(JOBS, "nlp", "big")?;
        (j["spec"]["suspend"] == false && j["metadata"]["annotations"].get("bursar.dev/hold").is_none()).then_some(())
    });
    // It runs past its 5 s: the enforcer suspends it, the Job controller deletes its pod, and the
    // run finishes as cancelled.
    cluster.run_pod("nlp", "big", "big-fghij", 4, unix_now());
    server.wait_for(30, "the big job started", || {
        audit_ids(&s).into_iter().find(|(i, _)| *i == format!("kube-agents:{big_job}-r1-started"))
    });
    let reclaimed = cluster.wait(30, "the big Job suspended by the reclaim", &[&enforce], |api| {
        let j = api.get(JOBS, "nlp", "big")?;
        (j["spec"]["suspend"] == true).then(|| j["metadata"]["annotations"]["bursar.dev/reclaimed"].clone())
    });
    assert!(reclaimed.as_str().is_some_and(|d| !d.is_empty()), "the decision is named on the Job");
    let now = rfc3339(unix_now());
    cluster.update(JOBS, "nlp", "big", true, json!({"status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended", "lastTransitionTime": now}]}}));
    api.delete(PODS, "nlp", "big-fghij").unwrap();
    let finished = server.wait_for(30, "the big job finished", || {
        audit_ids(&s).into_iter().find(|(i, _)| *i == format!("kube-agents:{big_job}-r1-finished")).map(|(_, v)| v)
    });
    assert_eq!(
        (finished["status"].as_str(), finished["kube_reason"].as_str()),
        (Some("cancelled"), Some("ReclaimedByBursar"))
    );
    let actions: Vec<Value> =
        audit_ids(&s).into_iter().filter(|(i, _)| i.starts_with("kube-agents:kube-")).map(|(_, v)| v).collect();
    let names: Vec<(&str, &str)> =
        actions.iter().map(|a| (a["action"].as_str().unwrap_or(""), a["type"].as_str().unwrap_or(""))).collect();
    assert!(
        names.contains(&("resume", "action.executed")) && names.contains(&("suspend", "action.executed")),
        "{actions:?}"
    );

    // Not an AdmissionReview: 400. Not JSON: 415.
    let (status, _) = hook.ask(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#);
    assert_eq!(status, 400);
    let r = hook.client.post("/mutate", "text/plain", b"x").unwrap();
    assert_eq!(r.status, 415);

    // serve unreachable: refused (fail closed), or admitted unchecked with a warning (fail open).
    let closed = Webhook::start(&dir, "webhook-closed", &ca_file, &cert, &key, "127.0.0.1:1", &[]);
    let (_, answer) = closed.ask(&review("req-x", "CREATE", &job("x", 1, true), &Value::Null, "alice", false));
    assert_eq!(answer["response"]["allowed"], false);
    assert!(answer["response"]["status"]["message"].as_str().unwrap_or("").contains("gave no decision"), "{answer}");
    let open = Webhook::start(&dir, "webhook-open", &ca_file, &cert, &key, "127.0.0.1:1", &["--fail-open"]);
    let (_, answer) = open.ask(&review("req-y", "CREATE", &job("y", 1, true), &Value::Null, "alice", false));
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"]["warnings"][0].as_str().unwrap_or("").contains("unchecked"), "{answer}");

    assert!(cluster.forbidden().is_empty(), "requests outside the manifests' ClusterRoles: {:?}", cluster.forbidden());
    enforce.assert_running();
    drop((watch, hook, closed, open));
}

const SLICE_CAP: &str = r#"
[[policy]]
id = "quota/one-gpu"
description = "A project holds at most one GPU at once: seven slices of an A100."
kind = "quota"
max_gpus = 1
"#;

/// A Job of one pod asking for `slices` × `nvidia.com/mig-1g.10gb` (the device plugin's mixed
/// strategy: a seventh of an A100 each).
fn mig_job(name: &str, slices: u32) -> Value {
    let mut j = job(name, 0, true);
    j["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({
        "limits": {"nvidia.com/mig-1g.10gb": slices.to_string()},
        "requests": {"nvidia.com/mig-1g.10gb": slices.to_string()}});
    j
}

/// Issue 55, item 7: MIG slices are GPUs. A Job asking for 2 × `nvidia.com/mig-1g.10gb` is
/// submitted, admitted and held as 2/7 of a GPU (not 0), and its run starts with 2/7; under a cap
/// of one GPU per project, seven slices fit and the eighth is refused.
#[test]
fn mig_slices_are_admitted_and_held_as_their_share_and_a_gpu_cap_counts_them() {
    let s = Scratch::new("kube-webhook-mig");
    let dir = s.0.clone();
    let ca = TestCa::new("webhook test CA").unwrap();
    let ca_file = ca.write(&dir, "ca").unwrap();
    let (cert, key) = ca.server().unwrap().write(&dir, "webhook").unwrap();
    let cluster = Cluster::start(&dir, "webhook.yaml", &[("watch", "bursar-kube-watch-objects")]);
    s.write_policy("policies.toml", SLICE_CAP);
    let config = dir.join("bursar.toml");
    std::fs::write(
        &config,
        principals(&[
            ("kube-webhook", &["scheduler"], "gpu-a-*"),
            ("kube-agents", &["producer"], "gpu-a-*"),
            ("reader", &["reader"], ""),
        ]),
    )
    .unwrap();
    let mut server = Server::start(&s, &["--config", config.to_str().unwrap(), "--tick", "200ms"]);
    server.token = Some(token("reader"));
    let addr = server.addr.to_string();
    let hook = Webhook::start(&dir, "webhook", &ca_file, &cert, &key, &addr, &[]);
    let agents_token = dir.join("kube-agents.token");
    std::fs::write(&agents_token, token("kube-agents")).unwrap();
    let watch_state = dir.join("watch.json");
    let watch = Agent::start(
        &dir,
        "watch",
        &[
            "watch",
            "--cluster",
            CLUSTER,
            "--kind",
            "batch/v1/Job",
            "--kubeconfig",
            cluster.kubeconfig("watch").to_str().unwrap(),
            "--server",
            &addr,
            "--token-file",
            agents_token.to_str().unwrap(),
            "--state",
            watch_state.to_str().unwrap(),
            "--resync",
            "200ms",
        ]
        .map(str::to_owned),
    );

    // Two slices: admitted, submitted as "2/7", held as 2/7 by the project.
    let two = mig_job("slices-2", 2);
    let (_, answer) = hook.ask(&review("req-mig-0", "CREATE", &two, &Value::Null, "alice", false));
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let job0 = bursar_kube::submit::job_id(CLUSTER, "req-mig-0");
    let submitted = audit_ids(&s)
        .into_iter()
        .find(|(i, _)| *i == format!("kube-webhook:{job0}-submitted"))
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(submitted["job"]["gpus"], "2/7", "{submitted}");
    let decision = server.decisions(0).into_iter().find(|d| d["job_id"] == job0.as_str()).unwrap();
    assert_eq!((decision["decision"].as_str(), decision["gpus"].as_str()), (Some("allow"), Some("2/7")), "{decision}");
    assert_eq!(server.get_json(&format!("/v1/jobs/{job0}"))["gpus"], "2/7");
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], "2/7");

    // Its pod runs: the watcher's start carries the slices' share.
    cluster.api.create(JOBS, "nlp", patched(&two, &answer)).unwrap();
    cluster.run_pod_with("nlp", "slices-2", "slices-2-abcde", json!({"nvidia.com/mig-1g.10gb": "2"}), unix_now());
    let started = server.wait_for(30, "the two slices' run started", || {
        audit_ids(&s).into_iter().find(|(i, _)| *i == format!("kube-agents:{job0}-r1-started")).map(|(_, v)| v)
    });
    assert_eq!(started["gpus"], "2/7", "{started}\n{}", watch.log_text());

    // Five more single slices fit: seven slices are the one GPU of the cap.
    for n in 1..=5 {
        let (_, answer) = hook.ask(&review(
            &format!("req-mig-{n}"),
            "CREATE",
            &mig_job(&format!("slice-{n}"), 1),
            &Value::Null,
            "alice",
            false,
        ));
        assert_eq!(answer["response"]["allowed"], true, "slice {n}: {answer}");
    }
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], 1, "7 × 1/7");

    // The eighth is refused, with the cap in the reason.
    let (_, answer) = hook.ask(&review("req-mig-8", "CREATE", &mig_job("slice-8", 1), &Value::Null, "alice", false));
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap_or("");
    assert!(message.starts_with("bursar: ") && message.contains("over its cap of 1"), "{answer}");
    let job8 = bursar_kube::submit::job_id(CLUSTER, "req-mig-8");
    let denied = server.decisions(0).into_iter().find(|d| d["job_id"] == job8.as_str()).unwrap();
    assert_eq!((denied["decision"].as_str(), denied["gpus"].as_str()), (Some("deny"), Some("1/7")), "{denied}");
    assert_eq!(server.get_json("/v1/projects/nlp")["held_gpus"], 1, "the refused slice is not held");

    assert!(cluster.forbidden().is_empty(), "requests outside the manifests' ClusterRoles: {:?}", cluster.forbidden());
    drop((watch, hook));
}
