//! Fuzz the admission webhook's reader of `AdmissionReview` bodies (every byte of them comes from
//! whoever may create a Job: names, labels, annotations, pod templates) and what it does with what
//! it reads: any bytes parse or return an error, never panic; a request that reads is triaged, its
//! submission (if any) is a v1 event that decodes as itself, and every answer to it serialises with
//! a JSON patch that applies to the object it came with.
#![no_main]

use bursar_kube::kinds::Kind;
use bursar_kube::review::{ReviewConfig, Triage, parse, respond, triage};
use bursar_kube::submit::Mapping;
use bursar_model::{Decision, DecisionKind, EventKind, Timestamp};
use libfuzzer_sys::fuzz_target;

fn decision(kind: DecisionKind) -> Decision {
    Decision {
        decision_id: "fuzz/0".into(),
        event_id: "fuzz".into(),
        time: Timestamp(0),
        job_id: Some("fuzz-000000000000".into()),
        project: None,
        decision: kind,
        until: Some(Timestamp(1_800_000_000_000)),
        policies: vec![],
        reason: "fuzz".into(),
        dry_run: false,
        admission: true,
        user: None,
        gpus: None,
        gpu_hours: None,
        hints: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(req) = parse(data) else { return };
    let kinds = ["batch/v1/Job", "v1/Pod", "JobSet", "PyTorchJob", "MPIJob"].iter().filter_map(|k| Kind::parse(k).ok()).collect();
    let cfg = ReviewConfig { mapping: Mapping { cluster: "fuzz".into(), ..Mapping::default() }, kinds, agent_users: vec!["agent".into()] };
    let Triage::Submit { kind, object, event, .. } = triage(&req, &cfg, Timestamp(0)) else { return };
    assert!(matches!(event.kind, EventKind::JobSubmitted(_)));
    let line = event.to_json();
    if bursar_model::names::check(&bursar_model::Input::Event((*event).clone())).is_ok() {
        assert_eq!(bursar_model::decode_event(&line).ok().as_ref(), Some(&*event), "{line}");
    }
    for k in [DecisionKind::Allow, DecisionKind::Deny, DecisionKind::RequireApproval, DecisionKind::Defer] {
        let answer = respond(&req, &cfg, &kind, &object, &decision(k));
        assert!(serde_json::to_vec(&answer.clone().into_review()).is_ok());
        if let Some(bytes) = &answer.patch {
            let patch: json_patch::Patch = serde_json::from_slice(bytes).expect("the patch reads");
            let mut out = object.clone();
            json_patch::patch(&mut out, &patch).expect("the patch applies to its object");
        }
    }
});
