//! Fair share of a GPU pool: a project may hold more than its weighted share of the pool only while no
//! other project has GPUs queued.
//!
//! On `job.submitted`, the projects that take part are those holding or queueing GPUs, plus the
//! submitter. A project's share is `pool_gpus × weight / (sum of the weights of those projects)`. If the
//! submitter would then hold more than its share while another project has admitted jobs waiting to
//! start (held but not running GPUs), the job is denied with the numbers; otherwise the policy says
//! nothing. TOML cannot say this: it needs every project's ledger at once.
//!
//! Config (`[policy.config]`): `pool_gpus` (required), `weights = { project = number }`,
//! `default_weight` (1).

use bursar_guest::{Config, Event, EventKind, Policy, Verdict, state};

struct FairShare {
    pool_gpus: u64,
    weights: Vec<(String, f64)>,
    default_weight: f64,
}

impl FairShare {
    fn weight(&self, project: &str) -> f64 {
        self.weights.iter().find(|(p, _)| p == project).map_or(self.default_weight, |(_, w)| *w)
    }
}

fn fmt_gpus(x: f64) -> String {
    if x.fract() == 0.0 { format!("{x:.0}") } else { format!("{x:.1}") }
}

impl Policy for FairShare {
    fn init(config: &Config) -> Result<Self, String> {
        let pool_gpus = config.u64_or("pool_gpus", 0)?;
        if pool_gpus == 0 {
            return Err("config `pool_gpus` must be a positive number of GPUs".to_owned());
        }
        let weights = config.numbers("weights")?;
        let default_weight = config.f64_or("default_weight", 1.0)?;
        if weights.iter().any(|(_, w)| !(*w > 0.0)) || !(default_weight > 0.0) {
            return Err("weights must be positive numbers".to_owned());
        }
        Ok(FairShare { pool_gpus, weights, default_weight })
    }

    fn evaluate(&self, event: &Event) -> Result<Vec<Verdict>, String> {
        let EventKind::JobSubmitted(job) = &event.kind else { return Ok(Vec::new()) };
        let projects = state::projects();
        let mut total_weight = self.weight(&job.project);
        let mut held = 0u32;
        let mut waiting: Vec<(String, u32)> = Vec::new();
        for p in &projects {
            if p.name == job.project {
                held = p.held;
                continue;
            }
            if p.held > 0 {
                total_weight += self.weight(&p.name);
            }
            let queued = p.held.saturating_sub(p.running);
            if queued > 0 {
                waiting.push((p.name.clone(), queued));
            }
        }
        let share = self.pool_gpus as f64 * self.weight(&job.project) / total_weight;
        let after = f64::from(held) + f64::from(job.gpus);
        if after <= share || waiting.is_empty() {
            return Ok(Vec::new());
        }
        let others: Vec<String> = waiting.iter().map(|(p, g)| format!("{p} has {g} GPUs queued")).collect();
        Ok(vec![Verdict::deny(format!(
            "project {} would hold {} GPUs, above its fair share of {} of {} (weight {} of {}), while {}",
            job.project,
            fmt_gpus(after),
            fmt_gpus(share),
            self.pool_gpus,
            self.weight(&job.project),
            total_weight,
            others.join(", ")
        ))])
    }
}

bursar_guest::export_policy!(FairShare);
