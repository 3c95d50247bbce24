//! Policies written directly against the engine's trait, for this crate's unit tests: a GPU cap with
//! named branches, so runner, coverage and replay can be tested without the TOML compiler.

use std::sync::Arc;

use bursar_engine::{Context, EventMask, Mode, Output, Policy, PolicyMeta, PolicySet, Verdict, VerdictKind};
use bursar_model::Hints;

/// Denies a submitted job asking for more than `cap` GPUs.
#[derive(Debug)]
pub struct GpuCap {
    meta: PolicyMeta,
    cap: u32,
}

impl GpuCap {
    pub fn new(id: &str, cap: u32, mode: Mode) -> GpuCap {
        GpuCap {
            meta: PolicyMeta {
                id: Arc::from(id),
                description: format!("at most {cap} GPUs per job"),
                mode,
                selector: Default::default(),
                events: EventMask::of_name("job.submitted").unwrap(),
                source: "fixtures".into(),
                kind: "rule",
                branches: vec!["over cap".into(), "within cap".into(), "over a thousand".into()],
                self_approval: false,
            },
            cap,
        }
    }
}

impl Policy for GpuCap {
    fn meta(&self) -> &PolicyMeta {
        &self.meta
    }

    fn evaluate(&self, cx: &Context<'_>, out: &mut Output) {
        let Some(job) = cx.submitted() else { return };
        if job.gpus > 1000 {
            out.verdict(Verdict::new(VerdictKind::Deny, "absurd").on_branch(2));
        } else if job.gpus > self.cap {
            out.verdict(
                Verdict::new(
                    VerdictKind::Deny,
                    format!("job {} asks for {} GPUs, over the cap of {}", job.id, job.gpus, self.cap),
                )
                .on_branch(0),
            );
        } else {
            out.verdict(Verdict::new(VerdictKind::Allow(Hints::default()), "").on_branch(1));
        }
    }
}

/// A set of caps.
pub fn set(caps: &[(&str, u32, Mode)]) -> Arc<PolicySet> {
    let policies: Vec<Arc<dyn Policy>> =
        caps.iter().map(|(id, cap, mode)| Arc::new(GpuCap::new(id, *cap, *mode)) as Arc<dyn Policy>).collect();
    Arc::new(PolicySet::new(policies, Vec::new(), "fixture".into()).unwrap())
}
