//! [`PolicyHints`]: the two numbers a report borrows from the policies — the idle threshold and the
//! monthly GPU-hour budgets — taken from the loaded [`PolicySet`], never from the policy files again.
//!
//! The policies describe what they limit themselves ([`bursar_engine::Policy::limits`]) and the set
//! folds the descriptions ([`PoolLimits`]); this module only keeps that description beside the facts
//! and asks it two questions:
//!
//! - **Idle threshold**: [`PoolLimits::idle_below`] — the highest `below` of the enforced idle-reclaim
//!   policies that apply to every job (a job under it is reclaimed by some rule, so it is idle in the
//!   engine's eyes). With none, [`DEFAULT_IDLE_BELOW`] (5 % utilisation).
//! - **Monthly budget of a project**: [`PoolLimits::gpu_hours`] for the project's ledger and a calendar
//!   month — the lowest of the enforced project quotas that apply to it (a job must pass every one).
//!   These draw the burn-down chart; no budget, no limit line.
//!
//! Dry-run policies define neither: they enforce nothing. The set is the one `check` and `eval`
//! load (`bursar::load_policies`), or the one `serve` has in force.

use bursar_engine::set::PoolLimits;
use bursar_engine::{PolicySet, ScopeKind};
use bursar_model::Period;
use serde::{Deserialize, Serialize};

/// The idle threshold when no enforced idle-reclaim policy is known.
pub const DEFAULT_IDLE_BELOW: f64 = 0.05;

/// What a report takes from the policies: the set's description of what it limits, kept (as JSON,
/// in `facts_meta`) with the facts it was used for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PolicyHints {
    /// What the set's policies limit.
    pub limits: PoolLimits,
}

impl PolicyHints {
    /// The hints of a loaded policy set.
    pub fn from_set(set: &PolicySet) -> PolicyHints {
        PolicyHints { limits: set.limits().clone() }
    }

    /// The idle threshold in force: the policies' or [`DEFAULT_IDLE_BELOW`].
    pub fn idle_threshold(&self) -> f64 {
        self.limits.idle_below().unwrap_or(DEFAULT_IDLE_BELOW)
    }

    /// The monthly GPU-hour budget of `project`, if an enforced quota sets one.
    pub fn monthly_budget(&self, project: &str) -> Option<f64> {
        self.limits.gpu_hours(ScopeKind::Project, project, Period::Month)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;

    fn set(toml: &str) -> PolicySet {
        let policies = bursar_lang::compile_str("t.toml", toml, Path::new(".")).map(|c| c.policies).unwrap();
        PolicySet::new(policies, Vec::new(), "t".into()).unwrap()
    }

    #[test]
    fn threshold_and_budgets_come_from_the_enforced_policies_of_the_set() {
        let h = PolicyHints::default();
        assert_eq!(h.idle_threshold(), DEFAULT_IDLE_BELOW);
        assert_eq!(h.monthly_budget("nlp"), None);
        let h = PolicyHints::from_set(&set(r#"
[[policy]]
id = "a"
description = "d"
kind = "reclaim"
[policy.idle]
below = 0.10
window = "1h"

[[policy]]
id = "b"
description = "d"
kind = "reclaim"
mode = "dry_run"
[policy.idle]
below = 0.50
window = "1h"

[[policy]]
id = "q"
description = "d"
kind = "quota"
gpu_hours = 1_000
limits = { nlp = 400 }

[[policy]]
id = "w"
description = "d"
kind = "quota"
period = "week"
gpu_hours = 10

[[policy]]
id = "dry"
description = "d"
kind = "quota"
mode = "dry_run"
gpu_hours = 5
"#));
        assert_eq!(h.idle_threshold(), 0.10, "the dry-run 0.50 defines nothing");
        assert_eq!(h.monthly_budget("nlp"), Some(400.0));
        assert_eq!(h.monthly_budget("vision"), Some(1000.0), "the weekly and dry-run quotas are no monthly budget");
    }

    #[test]
    fn hints_are_kept_as_json_beside_the_facts() {
        let h = PolicyHints::from_set(&set(
            "[[policy]]\nid = \"q\"\ndescription = \"d\"\nkind = \"quota\"\ngpu_hours = 7\nlimits = { p = 3 }\n",
        ));
        let back: PolicyHints = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.monthly_budget("p"), Some(3.0));
    }

    #[test]
    fn a_set_without_quota_or_idle_rule_defines_nothing() {
        // A general rule that reclaims on low utilisation is not an idle threshold a report can use.
        let s = Arc::new(set(
            "[[policy]]\nid = \"x\"\ndescription = \"d\"\nkind = \"rule\"\non = [\"job.sample\"]\nwhen = \"event.gpu_util < 0.5\"\ndecision = \"reclaim\"\nreason = \"low\"\n",
        ));
        let h = PolicyHints::from_set(&s);
        assert_eq!(h.idle_threshold(), DEFAULT_IDLE_BELOW);
        assert_eq!(h.monthly_budget("p"), None);
    }
}
