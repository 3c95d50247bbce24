//! The guest SDK: write a bursar policy as an ordinary Rust type with an `evaluate` function over typed
//! events, and build it into a WebAssembly component that the bursar host loads.
//!
//! ```ignore
//! use bursar_guest::{Config, Event, EventKind, Policy, Verdict};
//!
//! struct MaxGpus { limit: u32 }
//!
//! impl Policy for MaxGpus {
//!     fn init(config: &Config) -> Result<Self, String> {
//!         Ok(MaxGpus { limit: config.u64_or("limit", 8)? as u32 })
//!     }
//!     fn evaluate(&self, event: &Event) -> Result<Vec<Verdict>, String> {
//!         let EventKind::JobSubmitted(job) = &event.kind else { return Ok(vec![]) };
//!         if job.gpus > self.limit {
//!             return Ok(vec![Verdict::deny(format!("job {} asks for {} GPUs, more than {}", job.id, job.gpus, self.limit))]);
//!         }
//!         Ok(vec![])
//!     }
//! }
//!
//! bursar_guest::export_policy!(MaxGpus);
//! ```
//!
//! Build with `cargo build --release --target wasm32-unknown-unknown` (crate type `cdylib`); the host
//! (or `scripts/build-wasm.sh`) wraps the core module into a component whose only imports are the
//! `bursar:policy/state` interface. See `docs/wasm-policies.md`.
//!
//! Boundaries: the policy value is built once per instance by [`Policy::init`] from the manifest's
//! `[policy.config]` and is then read-only (`&self`). Keep no other state (no `static` cells, no
//! atomics): the host may replace an instance at any time (after a failure, on reload, on restart), and
//! decisions must depend only on the event and the state queries, or replay stops being deterministic.
//!
//! Layout: [`bindings`] are generated from `wit/policy.wit`; the types and the [`state`] queries are
//! re-exported at the root; [`Config`] reads the JSON config; [`export_policy!`] wires a type up.

/// Bindings generated from the WIT world `bursar:policy/policy`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "policy",
        pub_export_macro: true,
        export_macro_name: "export_guest",
        default_bindings_module: "bursar_guest::bindings",
    });
}

pub use bindings::bursar::policy::types::*;

/// Read-only questions about the engine's state before the event (usage, ledgers, jobs, assets, trials).
pub mod state {
    pub use crate::bindings::bursar::policy::state::*;
}

use std::sync::OnceLock;

/// A policy: built once from its configuration, then asked about each event.
pub trait Policy: Sized + Send + Sync + 'static {
    /// Builds the policy from the manifest's `[policy.config]` table; an error rejects the policy at load.
    fn init(config: &Config) -> Result<Self, String>;

    /// Returns the verdicts for one event (often none). An `Err` counts as a failure of the policy and the
    /// manifest's `on_error` applies.
    fn evaluate(&self, event: &Event) -> Result<Vec<Verdict>, String>;
}

/// The manifest's `[policy.config]` table.
#[derive(Debug, Clone, Default)]
pub struct Config {
    value: serde_json::Map<String, serde_json::Value>,
}

impl Config {
    /// Parses the JSON the host passes to `init`.
    pub fn parse(json: &str) -> Result<Config, String> {
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(serde_json::Value::Object(value)) => Ok(Config { value }),
            Ok(serde_json::Value::Null) => Ok(Config::default()),
            Ok(other) => Err(format!("config must be a table, got `{other}`")),
            Err(e) => Err(format!("config is not valid JSON: {e}")),
        }
    }

    /// The raw value under `key`.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.value.get(key)
    }

    /// A non-negative integer, or `default` when absent.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.value.get(key) {
            None => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| format!("config `{key}` must be a non-negative integer, got `{v}`")),
        }
    }

    /// A number, or `default` when absent.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, String> {
        match self.value.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| format!("config `{key}` must be a number, got `{v}`")),
        }
    }

    /// A string, or `default` when absent.
    pub fn str_or(&self, key: &str, default: &str) -> Result<String, String> {
        match self.value.get(key) {
            None => Ok(default.to_owned()),
            Some(v) => {
                v.as_str().map(str::to_owned).ok_or_else(|| format!("config `{key}` must be a string, got `{v}`"))
            }
        }
    }

    /// A table of numbers (`{ nlp = 2, vision = 1 }`), sorted by key; empty when absent.
    pub fn numbers(&self, key: &str) -> Result<Vec<(String, f64)>, String> {
        let Some(v) = self.value.get(key) else { return Ok(Vec::new()) };
        let table = v.as_object().ok_or_else(|| format!("config `{key}` must be a table of numbers, got `{v}`"))?;
        let mut out = Vec::with_capacity(table.len());
        for (k, n) in table {
            let n = n.as_f64().ok_or_else(|| format!("config `{key}.{k}` must be a number, got `{n}`"))?;
            out.push((k.clone(), n));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

impl Verdict {
    /// Refuse, with a reason.
    pub fn deny(reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::Deny, reason: reason.into(), gpu_hours: None }
    }

    /// No objection, with a reason and no hints.
    pub fn allow(reason: impl Into<String>) -> Verdict {
        let hints = Hints { queue: None, priority: None, region: None };
        Verdict { kind: VerdictKind::Allow(hints), reason: reason.into(), gpu_hours: None }
    }

    /// Hold for approval by `approvers` (empty: anyone) for `expires_after_ms`.
    pub fn require_approval(reason: impl Into<String>, approvers: Vec<String>, expires_after_ms: i64) -> Verdict {
        let a = Approval { approvers, expires_after: expires_after_ms };
        Verdict { kind: VerdictKind::RequireApproval(a), reason: reason.into(), gpu_hours: None }
    }

    /// Admit later, at `until_ms`.
    pub fn defer(reason: impl Into<String>, until_ms: i64) -> Verdict {
        Verdict { kind: VerdictKind::Defer(until_ms), reason: reason.into(), gpu_hours: None }
    }

    /// Release the job's GPUs.
    pub fn reclaim(reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::Reclaim, reason: reason.into(), gpu_hours: None }
    }

    /// Tell the owner.
    pub fn alert(reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::Alert, reason: reason.into(), gpu_hours: None }
    }
}

/// Glue used by [`export_policy!`]; not part of the API.
#[doc(hidden)]
pub fn __init<P: Policy>(cell: &OnceLock<P>, config: &str) -> Result<(), String> {
    if cell.get().is_some() {
        return Ok(());
    }
    let config = Config::parse(config)?;
    let policy = P::init(&config)?;
    let _ = cell.set(policy);
    Ok(())
}

/// Glue used by [`export_policy!`]; not part of the API.
#[doc(hidden)]
pub fn __evaluate<P: Policy>(cell: &OnceLock<P>, event: &Event) -> Result<Vec<Verdict>, String> {
    match cell.get() {
        Some(p) => p.evaluate(event),
        None => Err("the host called `evaluate` before `init`".to_owned()),
    }
}

/// Exports a [`Policy`] type as the component's `init` and `evaluate`.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        struct __BursarComponent;
        static __BURSAR_POLICY: ::std::sync::OnceLock<$policy> = ::std::sync::OnceLock::new();
        impl $crate::bindings::Guest for __BursarComponent {
            fn init(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                $crate::__init::<$policy>(&__BURSAR_POLICY, &config)
            }
            fn evaluate(
                event: $crate::Event,
            ) -> ::std::result::Result<::std::vec::Vec<$crate::Verdict>, ::std::string::String> {
                $crate::__evaluate::<$policy>(&__BURSAR_POLICY, &event)
            }
        }
        $crate::bindings::export_guest!(__BursarComponent with_types_in $crate::bindings);
    };
}
