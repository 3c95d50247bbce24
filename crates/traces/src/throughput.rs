//! A seeded, documented **model** of throughput for replaying traces that record none
//! (`bursar import … --util FILE --model-throughput`): what the cost-per-unit report and the
//! efficiency family's `[policy.cost_per_unit]` advice would show on real job history if its jobs had
//! reported their rate of work. Everything it adds is labelled as modelled: the GPU types are
//! `modelled-a` and `modelled-b`, the configurations `modelled-<user>`, the unit `modelled-tokens`.
//!
//! The rule, with `u(parts)` = [`stable_hash`]`(seed, parts)` / 2^64, uniform in [0, 1):
//!
//! - **GPU type** (only when the trace has none): per machine, so every job on a machine gets the
//!   same type — `modelled-b` when `u([machine, "gpu_type"]) < 1/3`, else `modelled-a` (the job's
//!   first machine; the job id when the trace names no machine).
//! - **Configuration** (only when the job names none): `modelled-<user>` (the project when the user
//!   is empty): one user's jobs are taken as runs of one configuration at various sizes.
//! - **Peak rate per GPU** of configuration `c` on `modelled-a`: `800 × 2^(3 u([c, "rate"]))` tokens/s
//!   (800 to 6,400); `modelled-b` is 2× as fast per GPU.
//! - **Scaling**: per-GPU efficiency at `N` GPUs = `e^(log2 N)`, per doubling `e = 0.80 + 0.18 u([c,
//!   "scaling"])` on `modelled-a` and 0.05 less on `modelled-b` (a faster card waits more on
//!   communication); × 0.85 when the job spans several nodes.
//! - **Noise**: each run × `0.9 + 0.2 u([job, "run"])`; each sample × `0.95 + 0.1 u([job, k, "sample"])`.
//! - **A sample's throughput** = peak per GPU × type speed × efficiency × `N` × the run's and the
//!   sample's noise × the sample's `gpu_util`: GPUs produce work only while busy, so a job that idles
//!   (the utilisation series attached by `--util`) produces less and costs more per unit.

use bursar_model::JobSpec;

use crate::rng::stable_hash;
use crate::{JobTrace, Report};

/// The unit of modelled throughput, per second.
pub const UNIT: &str = "modelled-tokens/s";

/// The two modelled GPU types: name, speed per GPU relative to `modelled-a`, scaling penalty.
pub const TYPES: [(&str, f64, f64); 2] = [("modelled-a", 1.0, 0.0), ("modelled-b", 2.0, 0.05)];

/// The throughput model with its seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThroughputModel {
    /// Seed of every choice (the same `--seed` as the utilisation rule).
    pub seed: u64,
}

impl ThroughputModel {
    fn u(&self, parts: &[&str]) -> f64 {
        (stable_hash(self.seed, parts) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Fills the GPU type and configuration a trace lacks (see the module documentation).
    pub fn fill(&self, job: &mut JobTrace, report: &mut Report) {
        if job.spec.gpu_type.is_none() {
            let at = job.machine.as_deref().unwrap_or(&job.spec.id);
            let b = self.u(&[at, "gpu_type"]) < 1.0 / 3.0;
            job.spec.gpu_type = Some(TYPES[usize::from(b)].0.to_owned());
            report.note(
                "--model-throughput: GPU type modelled per machine (modelled-b on a third of the machines, else modelled-a): the trace records none",
            );
        }
        if !job.spec.has_config() {
            let who = if job.spec.user.is_empty() { &job.spec.project } else { &job.spec.user };
            job.spec.config = Some(format!("modelled-{who}"));
            report.note("--model-throughput: configuration modelled as `modelled-<user>`: the trace records none");
        }
    }

    /// The job's rate at full utilisation and no sample noise, in [`UNIT`] (the whole job).
    pub fn peak(&self, spec: &JobSpec) -> f64 {
        let config = spec.config_key();
        let (speed, penalty) = TYPES
            .iter()
            .find(|(t, _, _)| Some(*t) == spec.gpu_type.as_deref())
            .map_or((1.0, 0.0), |(_, s, p)| (*s, *p));
        let per_gpu = 800.0 * 2f64.powf(3.0 * self.u(&[&config, "rate"])) * speed;
        let e = 0.80 + 0.18 * self.u(&[&config, "scaling"]) - penalty;
        let n = spec.gpus.as_f64().max(1.0);
        let mut eff = e.powf(n.log2());
        if spec.nodes > 1 {
            eff *= 0.85;
        }
        let run = 0.9 + 0.2 * self.u(&[&spec.id, "run"]);
        per_gpu * eff * n * run
    }

    /// The throughput of the job's `k`-th sample (1-based) at utilisation `gpu_util`.
    pub fn sample(&self, spec: &JobSpec, peak: f64, k: u32, gpu_util: f64) -> f64 {
        let noise = 0.95 + 0.1 * self.u(&[&spec.id, &k.to_string(), "sample"]);
        peak * noise * gpu_util.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, user: &str, machine: Option<&str>, gpus: u32, nodes: u32) -> JobTrace {
        JobTrace {
            spec: JobSpec {
                id: id.into(),
                project: "p".into(),
                user: user.into(),
                gpus: gpus.into(),
                nodes,
                ..JobSpec::default()
            },
            submitted: bursar_model::Timestamp(0),
            started: None,
            finished: None,
            machine: machine.map(str::to_owned),
        }
    }

    #[test]
    fn types_follow_the_machine_and_configurations_the_user() {
        let m = ThroughputModel { seed: 7 };
        let mut r = Report::new("t");
        let (mut a, mut b) = (job("a", "u1", Some("m1"), 1, 1), job("b", "u2", Some("m1"), 8, 1));
        m.fill(&mut a, &mut r);
        m.fill(&mut b, &mut r);
        assert_eq!(a.spec.gpu_type, b.spec.gpu_type, "one machine, one type");
        assert_eq!(a.spec.config.as_deref(), Some("modelled-u1"));
        assert_eq!(r.notes.len(), 2);
        // About a third of the machines are modelled-b.
        let bs = (0..3000)
            .filter(|i| {
                let mut j = job("x", "u", Some(&format!("m{i}")), 1, 1);
                m.fill(&mut j, &mut r);
                j.spec.gpu_type.as_deref() == Some("modelled-b")
            })
            .count();
        assert!((900..1100).contains(&bs), "{bs}");
        // What the trace has is kept.
        let mut k = job("k", "u", None, 1, 1);
        k.spec.gpu_type = Some("H100".into());
        k.spec.config = Some("real".into());
        m.fill(&mut k, &mut r);
        assert_eq!((k.spec.gpu_type.as_deref(), k.spec.config.as_deref()), (Some("H100"), Some("real")));
    }

    #[test]
    fn the_model_scales_below_linear_and_is_seeded() {
        let m = ThroughputModel { seed: 7 };
        let mut spec =
            JobSpec { id: "j".into(), gpus: 1.into(), nodes: 1, config: Some("c".into()), ..JobSpec::default() };
        spec.gpu_type = Some("modelled-a".into());
        let one = m.peak(&spec);
        spec.gpus = 8.into();
        let eight = m.peak(&spec);
        let per_gpu_ratio = eight / 8.0 / one;
        assert!(per_gpu_ratio > 0.80f64.powi(3) - 1e-9 && per_gpu_ratio < 0.98f64.powi(3) + 1e-9, "{per_gpu_ratio}");
        spec.nodes = 2;
        assert!((m.peak(&spec) - eight * 0.85).abs() < 1e-9);
        assert_eq!(m.peak(&spec), ThroughputModel { seed: 7 }.peak(&spec));
        assert_ne!(m.peak(&spec), ThroughputModel { seed: 8 }.peak(&spec));
        let s = m.sample(&spec, 1000.0, 3, 0.5);
        assert!((475.0..=525.0).contains(&s), "{s}");
        assert_eq!(m.sample(&spec, 1000.0, 3, 0.0), 0.0, "an idle GPU produces nothing");
    }
}
