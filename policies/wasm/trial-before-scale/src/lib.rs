//! Trial before scale, composite: a job above `min_gpus` GPUs must climb a ladder of successful runs of
//! the same configuration (`job-spec.config-key`), and a configuration that failed since its last
//! success needs a person's yes.
//!
//! On `job.submitted` with more than `min_gpus` GPUs, from the configuration's history:
//! - no success within `window_days`: deny, saying what trial to run;
//! - the largest recent success used fewer than `gpus / max_scale` GPUs: require approval (the jump is
//!   too big), naming the largest step allowed;
//! - the latest failure is newer than the latest success: require approval (the configuration is
//!   failing now);
//! - otherwise: nothing.
//!
//! The TOML `trial` family checks one recent small success; this rule weighs the whole history.
//! Config: `min_gpus` (8), `max_scale` (8), `window_days` (14), `approvers` (a list of names, default
//! anyone), `approval_hours` (24).

use bursar_guest::{Config, Event, EventKind, Policy, Verdict, state};

const DAY_MS: i64 = 86_400_000;

struct TrialBeforeScale {
    min_gpus: u32,
    max_scale: u32,
    window_days: i64,
    approvers: Vec<String>,
    approval_ms: i64,
}

impl Policy for TrialBeforeScale {
    fn init(config: &Config) -> Result<Self, String> {
        let approvers = match config.get("approvers") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>())
                .ok_or_else(|| format!("config `approvers` must be a list of names, got `{v}`"))?,
        };
        let max_scale = config.u64_or("max_scale", 8)?.max(1);
        Ok(TrialBeforeScale {
            min_gpus: u32::try_from(config.u64_or("min_gpus", 8)?).map_err(|e| e.to_string())?,
            max_scale: u32::try_from(max_scale).map_err(|e| e.to_string())?,
            window_days: i64::try_from(config.u64_or("window_days", 14)?).map_err(|e| e.to_string())?,
            approvers,
            approval_ms: i64::try_from(config.u64_or("approval_hours", 24)?.max(1) * 3_600_000)
                .map_err(|e| e.to_string())?,
        })
    }

    fn evaluate(&self, event: &Event) -> Result<Vec<Verdict>, String> {
        let EventKind::JobSubmitted(job) = &event.kind else { return Ok(Vec::new()) };
        if job.gpus <= self.min_gpus {
            return Ok(Vec::new());
        }
        let since = event.time - self.window_days * DAY_MS;
        let history = state::trial(&job.config_key);
        let recent: Vec<_> = history
            .as_ref()
            .map(|h| h.successes.iter().filter(|r| r.at >= since).cloned().collect())
            .unwrap_or_default();
        let step = job.gpus.div_ceil(self.max_scale);
        let Some(largest) = recent.iter().max_by_key(|r| (r.gpus, r.at)) else {
            return Ok(vec![Verdict::deny(format!(
                "job {} asks for {} GPUs but configuration {} has no successful run in the last {} days; run a trial with at most {} GPUs first",
                job.id, job.gpus, job.config_key, self.window_days, self.min_gpus
            ))]);
        };
        if largest.gpus < step {
            return Ok(vec![Verdict::require_approval(
                format!(
                    "job {} scales configuration {} from {} to {} GPUs, more than {}x its largest successful run; a run with at least {} GPUs would not need approval",
                    job.id, job.config_key, largest.gpus, job.gpus, self.max_scale, step
                ),
                self.approvers.clone(),
                self.approval_ms,
            )]);
        }
        let last_success = recent.iter().map(|r| r.at).max().unwrap_or(i64::MIN);
        if let Some(failed) = history.and_then(|h| h.last_failure)
            && failed > last_success
        {
            return Ok(vec![Verdict::require_approval(
                format!(
                    "job {} asks for {} GPUs but configuration {} failed after its last successful run",
                    job.id, job.gpus, job.config_key
                ),
                self.approvers.clone(),
                self.approval_ms,
            )]);
        }
        Ok(Vec::new())
    }
}

bursar_guest::export_policy!(TrialBeforeScale);
