//! Readiness as a WebAssembly policy: a `job.submitted` is denied unless what `require` lists (image,
//! data, scripts) is declared ready. It is the twin of the TOML `readiness` family, used by the
//! differential tests (`crates/wasm/tests/differential.rs`), so it answers exactly like the family: a
//! deny naming what is not ready, or an allow with an empty note when everything is.
//!
//! Config: `require` (a list among `image`, `data`, `script`; default all three).

use bursar_guest::{Config, Event, EventKind, Policy, Verdict};

const ITEMS: [&str; 3] = ["image", "data", "script"];

struct Readiness {
    require: Vec<String>,
}

impl Policy for Readiness {
    fn init(config: &Config) -> Result<Self, String> {
        let require = match config.get("require") {
            None => ITEMS.iter().map(|s| (*s).to_owned()).collect(),
            Some(v) => {
                let list = v
                    .as_array()
                    .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| format!("config `require` must be a list of names, got `{v}`"))?;
                if let Some(bad) = list.iter().find(|x| !ITEMS.contains(&x.as_str())) {
                    return Err(format!("config `require`: `{bad}` is not one of image, data, script"));
                }
                list
            }
        };
        Ok(Readiness { require })
    }

    fn evaluate(&self, event: &Event) -> Result<Vec<Verdict>, String> {
        let EventKind::JobSubmitted(job) = &event.kind else { return Ok(Vec::new()) };
        let mut missing = Vec::new();
        for item in ITEMS {
            if !self.require.iter().any(|r| r == item) {
                continue;
            }
            let ready = match item {
                "image" => job.ready.image,
                "data" => job.ready.data,
                _ => job.ready.script,
            };
            if ready != Some(true) {
                missing.push(item);
            }
        }
        if missing.is_empty() {
            return Ok(vec![Verdict::allow("")]);
        }
        Ok(vec![Verdict::deny(format!(
            "job {} is not ready: {} not declared ready; GPUs are granted only when {} are ready",
            job.id,
            missing.join(", "),
            self.require.join(", ")
        ))])
    }
}

bursar_guest::export_policy!(Readiness);
