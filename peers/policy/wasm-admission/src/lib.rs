//! The peers' admission policy as a bursar WebAssembly policy: the same rules as `../admission.toml`
//! (and the Cedar, Rego and plain Rust versions), written as one Rust function with the guest SDK.
//!
//! On `job.submitted`: deny if the image, data or script is not declared ready; if the project's
//! GPU-hours this month (reserved + used, read with `state::usage`) plus the job's would pass the quota;
//! if the model (params × bytes per param × overhead, sharded over the job's GPUs) does not fit the GPU
//! memory; or if the GPUs the project holds in the job's queue plus the job's would pass the queue's cap.
//! Otherwise require approval for jobs over `gpus_over` GPUs or `hours_over` hours, else allow.
//!
//! The per-queue GPUs: the WIT `state` interface answers GPUs held per ledger (project, user or tag
//! pair), not per queue inside a ledger. So the producer tags each submission with `queue_tag` =
//! `<project>/<queue>` and the policy reads that tag pair's ledger (`state::ledger(Tag, ..)`), which the
//! engine keeps exactly like the project ledger's per-queue count (both change on admission and
//! release). A job in a capped queue without that tag (or with a value naming another project or queue)
//! is an error, so the manifest's `on_error` applies rather than a guess.
//!
//! Config (`[policy.config]`): `gpu_hours` (monthly project quota), `queues = { queue = cap }`,
//! `queue_tag`, `bytes_per_param`, `overhead`, `gpus_over`, `hours_over`, `approvers`, `expires_hours`.

use bursar_guest::{Config, Event, EventKind, Period, Policy, ScopeKind, Verdict, state};

struct Admission {
    gpu_hours: f64,
    queues: Vec<(String, u32)>,
    queue_tag: String,
    bytes_per_param: f64,
    overhead: f64,
    gpus_over: u32,
    hours_over: f64,
    approvers: Vec<String>,
    expires_ms: i64,
}

fn positive(config: &Config, key: &str, default: f64) -> Result<f64, String> {
    let v = config.f64_or(key, default)?;
    if v > 0.0 && v.is_finite() { Ok(v) } else { Err(format!("config `{key}` must be a positive number, got {v}")) }
}

impl Policy for Admission {
    fn init(config: &Config) -> Result<Self, String> {
        let gpu_hours = positive(config, "gpu_hours", f64::NAN)
            .map_err(|e| format!("{e} (the monthly GPU-hour quota is required)"))?;
        let mut queues = Vec::new();
        for (q, cap) in config.numbers("queues")? {
            if !(cap >= 0.0 && cap.fract() == 0.0 && cap <= f64::from(u32::MAX)) {
                return Err(format!("config `queues.{q}` must be a whole number of GPUs, got {cap}"));
            }
            queues.push((q, cap as u32));
        }
        let approvers = match config.get("approvers") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>())
                .ok_or_else(|| format!("config `approvers` must be a list of names, got `{v}`"))?,
        };
        Ok(Admission {
            gpu_hours,
            queues,
            queue_tag: config.str_or("queue_tag", "project_queue")?,
            bytes_per_param: positive(config, "bytes_per_param", 2.0)?,
            overhead: positive(config, "overhead", 1.2)?,
            gpus_over: u32::try_from(config.u64_or("gpus_over", 32)?)
                .map_err(|e| format!("config `gpus_over`: {e}"))?,
            hours_over: positive(config, "hours_over", 48.0)?,
            approvers,
            expires_ms: (positive(config, "expires_hours", 24.0)? * 3_600_000.0).round() as i64,
        })
    }

    fn evaluate(&self, event: &Event) -> Result<Vec<Verdict>, String> {
        let EventKind::JobSubmitted(job) = &event.kind else { return Ok(Vec::new()) };
        let mut why: Vec<String> = Vec::new();

        // Readiness.
        let missing: Vec<&str> = [("image", job.ready.image), ("data", job.ready.data), ("script", job.ready.script)]
            .into_iter()
            .filter(|(_, r)| *r != Some(true))
            .map(|(name, _)| name)
            .collect();
        if !missing.is_empty() {
            why.push(format!("{} not declared ready", missing.join(", ")));
        }

        // Project GPU-hour quota, this month, reserved at admission (settled by runtime).
        let u = state::usage(ScopeKind::Project, &job.project, Period::Month, event.now);
        let after = (u.reserved + u.used) + f64::from(job.gpus) * job.requested_hours;
        if after > self.gpu_hours + 1e-9 {
            why.push(format!(
                "project {} would reach {after:.1} of its {} GPU-hours this month",
                job.project, self.gpu_hours
            ));
        }

        // GPUs the project holds in the job's queue, from the `<project>/<queue>` tag pair's ledger.
        if let Some(q) = &job.queue
            && let Some((_, cap)) = self.queues.iter().find(|(name, _)| name == q)
        {
            let tag = job.tags.iter().find(|t| t.key == self.queue_tag).ok_or_else(|| {
                format!("job {} in capped queue {q} has no `{}` tag (`<project>/<queue>`)", job.id, self.queue_tag)
            })?;
            if tag.value.split_once('/') != Some((job.project.as_str(), q.as_str())) {
                return Err(format!(
                    "job {}: tag `{}` is `{}`, expected `{}/{q}`",
                    job.id, self.queue_tag, tag.value, job.project
                ));
            }
            let held = state::ledger(ScopeKind::Tag, &format!("{}={}", tag.key, tag.value)).map_or(0, |l| l.held);
            if u64::from(held) + u64::from(job.gpus) > u64::from(*cap) {
                why.push(format!(
                    "project {} would hold {} GPUs in queue {q}, over its cap of {cap}",
                    job.project,
                    u64::from(held) + u64::from(job.gpus)
                ));
            }
        }

        // Memory fit, sharded over the job's GPUs.
        if let (Some(params), Some(mem)) = (job.model_params_b, job.gpu_mem_gb) {
            let need = params * self.bytes_per_param * self.overhead / f64::from(job.gpus.max(1));
            if need > mem {
                why.push(format!("the model needs {need:.1} GB per GPU but a GPU has {mem} GB"));
            }
        }

        if !why.is_empty() {
            return Ok(vec![Verdict::deny(format!("job {}: {}", job.id, why.join("; ")))]);
        }

        // Approval for big or long jobs.
        if job.gpus > self.gpus_over || job.requested_hours > self.hours_over {
            let reason = format!(
                "job {} asks for {} GPUs for {} hours (approval over {} GPUs or {} hours)",
                job.id, job.gpus, job.requested_hours, self.gpus_over, self.hours_over
            );
            return Ok(vec![Verdict::require_approval(reason, self.approvers.clone(), self.expires_ms)]);
        }
        Ok(vec![Verdict::allow("")])
    }
}

bursar_guest::export_policy!(Admission);
