//! [`PolicyHints`]: the two numbers a report borrows from the policy files — the idle threshold and
//! the monthly GPU-hour budgets — read from the TOML directly, without compiling the policies.
//!
//! - **Idle threshold**: the `below` of every *enforced* `kind = "reclaim"` policy with a
//!   `[policy.idle]` table; if there are several, the lowest (a sample under it is idle for every
//!   idle rule). With none, [`DEFAULT_IDLE_BELOW`] (5 % utilisation).
//! - **Monthly budgets**: every enforced `kind = "quota"` policy with `scope = "project"` (the default)
//!   and `period = "month"` (the default): `limits.<project>`, else `gpu_hours`. With several, the lowest
//!   applies (a job must pass every quota). These draw the burn-down chart; no budget, no limit line.
//!
//! Policies in `dry_run` mode are ignored: they enforce nothing, so they define neither.
//! Files that do not parse are skipped here: `bursar check` is where they are reported.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The idle threshold when no enforced idle-reclaim policy is known.
pub const DEFAULT_IDLE_BELOW: f64 = 0.05;

/// What a report takes from the policies.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PolicyHints {
    /// The lowest `below` of the enforced idle-reclaim policies.
    pub idle_below: Option<f64>,
    /// Monthly GPU-hour budget per project (explicit `limits`).
    pub monthly_limits: BTreeMap<String, f64>,
    /// Monthly GPU-hour budget of a project without its own limit (`gpu_hours`).
    pub monthly_default: Option<f64>,
}

impl PolicyHints {
    /// Reads every `*.toml` file under `dir` (or `dir` itself if it is a file), skipping `*.test.toml`.
    pub fn from_dir(dir: &Path) -> PolicyHints {
        let mut hints = PolicyHints::default();
        let mut files = Vec::new();
        collect(dir, &mut files, 0);
        files.sort();
        for f in files {
            if let Ok(text) = std::fs::read_to_string(&f) {
                hints.add_toml(&text);
            }
        }
        hints
    }

    /// Adds what one policy file says.
    pub fn add_toml(&mut self, text: &str) {
        let Ok(doc) = text.parse::<toml::Table>() else { return };
        let Some(policies) = doc.get("policy").and_then(toml::Value::as_array) else { return };
        for p in policies {
            let Some(p) = p.as_table() else { continue };
            let s = |k: &str| p.get(k).and_then(toml::Value::as_str);
            if s("mode") == Some("dry_run") {
                continue;
            }
            match s("kind") {
                Some("reclaim") => {
                    if let Some(b) = p.get("idle").and_then(|i| i.get("below")).and_then(number)
                        && (0.0..=1.0).contains(&b)
                    {
                        self.idle_below = Some(self.idle_below.map_or(b, |x| x.min(b)));
                    }
                }
                Some("quota") => {
                    if s("scope").unwrap_or("project") != "project" || s("period").unwrap_or("month") != "month" {
                        continue;
                    }
                    if let Some(g) = p.get("gpu_hours").and_then(number).filter(|g| *g > 0.0) {
                        self.monthly_default = Some(self.monthly_default.map_or(g, |x| x.min(g)));
                    }
                    if let Some(limits) = p.get("limits").and_then(toml::Value::as_table) {
                        for (k, v) in limits {
                            if let Some(n) = number(v).filter(|n| *n > 0.0) {
                                let e = self.monthly_limits.entry(k.clone()).or_insert(n);
                                *e = e.min(n);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The idle threshold in force: the policies' or [`DEFAULT_IDLE_BELOW`].
    pub fn idle_threshold(&self) -> f64 {
        self.idle_below.unwrap_or(DEFAULT_IDLE_BELOW)
    }

    /// The monthly budget of `project`, if any policy sets one.
    pub fn monthly_budget(&self, project: &str) -> Option<f64> {
        let own = self.monthly_limits.get(project).copied();
        match (own, self.monthly_default) {
            (Some(a), _) => Some(a),
            (None, d) => d,
        }
    }
}

fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        _ => None,
    }
}

fn collect(path: &Path, out: &mut Vec<std::path::PathBuf>, depth: u32) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    if depth > 8 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(path) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out, depth + 1);
        } else if let Some(name) = p.file_name().and_then(|n| n.to_str())
            && name.ends_with(".toml")
            && !name.ends_with(".test.toml")
        {
            out.push(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_threshold_and_budgets_from_enforced_policies_only() {
        let mut h = PolicyHints::default();
        assert_eq!(h.idle_threshold(), DEFAULT_IDLE_BELOW);
        h.add_toml(
            r#"
[[policy]]
id = "a"
kind = "reclaim"
[policy.idle]
below = 0.10
window = "1h"

[[policy]]
id = "b"
kind = "reclaim"
mode = "dry_run"
[policy.idle]
below = 0.01

[[policy]]
id = "q"
kind = "quota"
gpu_hours = 1_000
limits = { nlp = 400 }

[[policy]]
id = "w"
kind = "quota"
period = "week"
gpu_hours = 10
"#,
        );
        assert_eq!(h.idle_threshold(), 0.10);
        assert_eq!(h.monthly_budget("nlp"), Some(400.0));
        assert_eq!(h.monthly_budget("vision"), Some(1000.0));
    }

    #[test]
    fn reads_the_repository_policies() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
        let h = PolicyHints::from_dir(&dir);
        assert!(h.idle_below.is_some(), "policies/ has an enforced idle-reclaim policy");
        assert!(h.monthly_default.is_some() || !h.monthly_limits.is_empty(), "policies/ has a monthly quota");
    }
}
