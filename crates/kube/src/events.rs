//! The events the Kubernetes agents send, built as `bursar-model` types and serialised by the model
//! (no JSON is assembled here).
//!
//! Every event names its object with added fields (v1 keeps fields a producer adds): `kube_cluster`,
//! `kube_namespace`, `kube_kind`, `kube_name`, and a start also `kube_pods`, the pods of the run,
//! which is how serve's utilisation source maps dcgm-exporter's `namespace`/`pod` labels to the job.
//! A start carries `gpus`, what the pods hold; a run that ends without ending the job is a
//! `job.requeued`; an admitted unit seen before it runs is a `job.queued` (wire v1.x,
//! docs/wire-format.md).

use bursar_agent::record::add_field;
use bursar_model::{Event, EventKind, Extra};

use crate::lifecycle::{Planned, Step, UnitState};
use crate::submit::object_fields;

/// The fields naming the unit of `st` on cluster `cluster`.
pub fn fields(cluster: &str, st: &UnitState) -> Extra {
    object_fields(cluster, &st.namespace, &st.kind, &st.name)
}

/// The event of one lifecycle step.
pub fn of_step(cluster: &str, step: &Step) -> Event {
    let mut extra = fields(cluster, &step.state);
    let job_id = step.job_id.clone();
    let (time, kind) = match &step.event {
        Planned::Queued { at, reason } => {
            if let Some(r) = reason {
                add_field(&mut extra, "reason", r);
            }
            (*at, EventKind::JobQueued { job_id })
        }
        Planned::Started { at, gpus, pods } => {
            add_field(&mut extra, "kube_pods", pods);
            let info = bursar_model::StartInfo { gpus: Some(*gpus), ..bursar_model::StartInfo::default() };
            (*at, EventKind::JobStarted { job_id, info })
        }
        Planned::Requeued { at, reason } => {
            add_field(&mut extra, "kube_reason", reason);
            (*at, EventKind::JobRequeued { job_id })
        }
        Planned::Finished { at, status, reason } => {
            if !reason.is_empty() {
                add_field(&mut extra, "kube_reason", reason);
            }
            (*at, EventKind::JobFinished { job_id, status: *status })
        }
    };
    Event { id: step.id.clone(), time, kind, extra }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Sent;
    use bursar_model::{FinishStatus, Gpus, Timestamp, decode_event};

    fn state() -> UnitState {
        UnitState {
            job_id: "kube-0a1b2c3d4e5f".into(),
            run: 2,
            sent: Sent::Started,
            run_started: 0,
            run_ended: 0,
            pods: vec![],
            waits: String::new(),
            waits_sent: 0,
            namespace: "nlp".into(),
            kind: "Workload".into(),
            name: "job-train-3f2a1".into(),
        }
    }

    fn step(id: &str, event: Planned) -> Step {
        Step { uid: "u".into(), id: id.into(), job_id: "kube-0a1b2c3d4e5f".into(), event, state: state() }
    }

    #[test]
    fn lifecycle_events_are_wire_events_naming_the_object() {
        let s = of_step(
            "gpu-a",
            &step(
                "kube-0a1b2c3d4e5f-r2-started",
                Planned::Started {
                    at: Timestamp(1_796_018_054_000),
                    gpus: Gpus::whole(8),
                    pods: vec!["train-0-x".into(), "train-1-y".into()],
                },
            ),
        );
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(v["type"], "job.started");
        assert_eq!(v["gpus"], 8, "what the pods hold");
        assert_eq!(v["kube_pods"], serde_json::json!(["train-0-x", "train-1-y"]));
        assert_eq!(v["kube_namespace"], "nlp");
        assert_eq!(v["kube_cluster"], "gpu-a");
        assert_eq!(decode_event(&s.to_json()).unwrap(), s, "decodes as the same event");

        // Two MIG slices of one GPU (2 × nvidia.com/mig-1g.10gb): the share, as the wire writes it.
        let slices = Planned::Started { at: Timestamp(0), gpus: Gpus::fraction(2, 7).unwrap(), pods: vec!["p".into()] };
        let m = of_step("gpu-a", &step("kube-0a1b2c3d4e5f-r2-started", slices));
        assert!(m.to_json().contains(r#""gpus":"2/7""#), "{}", m.to_json());
        assert_eq!(decode_event(&m.to_json()).unwrap(), m);

        let r = of_step(
            "gpu-a",
            &step(
                "kube-0a1b2c3d4e5f-r2-requeued",
                Planned::Requeued { at: Timestamp(1_796_018_100_000), reason: "Preempted".into() },
            ),
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["job_id"].as_str(), v["kube_reason"].as_str()),
            (Some("job.requeued"), Some("kube-0a1b2c3d4e5f"), Some("Preempted"))
        );
        assert_eq!(decode_event(&r.to_json()).unwrap(), r);

        let f = of_step(
            "gpu-a",
            &step(
                "kube-0a1b2c3d4e5f-r2-finished",
                Planned::Finished {
                    at: Timestamp(1_796_018_200_000),
                    status: FinishStatus::Cancelled,
                    reason: "InactiveWorkload".into(),
                },
            ),
        );
        let v: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!((v["type"].as_str(), v["status"].as_str()), (Some("job.finished"), Some("cancelled")));
        assert_eq!(v["time"], "2026-11-30T05:56:40Z");

        let q = of_step("gpu-a", &step("kube-0a1b2c3d4e5f-queued", Planned::Queued { at: Timestamp(0), reason: None }));
        assert_eq!(decode_event(&q.to_json()).unwrap(), q);
        assert_eq!(q.kind.type_name(), "job.queued");
        let why = "Pending: couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu";
        let w = of_step(
            "gpu-a",
            &step("kube-0a1b2c3d4e5f-waits-1", Planned::Queued { at: Timestamp(0), reason: Some(why.into()) }),
        );
        let v: serde_json::Value = serde_json::from_str(&w.to_json()).unwrap();
        assert_eq!((v["type"].as_str(), v["reason"].as_str()), (Some("job.queued"), Some(why)), "{v}");
    }
}
