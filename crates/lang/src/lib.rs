//! The TOML policy language: what a platform team writes, compiled once at load into [`Policy`] trait
//! objects that the engine runs.
//!
//! A policy file holds one or more `[[policy]]` tables. Each has an `id`, a `description`, a `kind`
//! (one of the nine families of the brief, a general `rule` with a `when` expression, or `wasm` for a
//! WebAssembly component), a `mode` (`enforce` or `dry_run`) and a selector. Parsing keeps byte spans
//! for every value so that a validation error points at the value in the file (`file:line:col`), and
//! every error in a file is reported, not only the first.
//!
//! Boundaries: this crate reads text it is given (no directory walking, see `bursar-loader`) and does not
//! run WebAssembly: a `kind = "wasm"` table becomes a [`WasmDecl`] for the host crate to instantiate.
//!
//! Layout:
//! - [`diag`]: diagnostics with file, line, column, underline and help.
//! - `reader`: a typed walk over the spanned TOML tree that collects errors.
//! - `expr`: the expression language of `rule` policies, `when` conditions and reason templates.
//! - `families`: the nine families and `rule`, each implementing [`Policy`].

mod compile;
pub mod diag;
pub mod expr;
pub mod families;
pub mod reader;

use std::path::PathBuf;
use std::sync::Arc;

use bursar_engine::{Policy, PolicyMeta};

pub use compile::KINDS;
pub use diag::Diagnostic;

/// What a guest failure turns into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Fail closed: deny (for admissions) — the default.
    #[default]
    Deny,
    /// Fail open: allow.
    Allow,
    /// Ignore the policy for this input.
    Skip,
}

/// How a WebAssembly policy's instances are used across calls (`strategy` in `[policy.limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WasmStrategy {
    /// One instance, initialised once and reused for every call (the host's default).
    Reuse,
    /// A new instance, with `init`, for every call: no guest memory survives a call.
    Fresh,
}

/// Resource limits of a WebAssembly policy; `None` means the host's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WasmLimits {
    /// Wall-clock deadline per call, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Fuel per call.
    pub fuel: Option<u64>,
    /// Linear memory cap, in MiB.
    pub memory_mb: Option<u64>,
    /// Failures before the policy is quarantined.
    pub max_failures: Option<u32>,
    /// Instance strategy; a host configured for fresh instances keeps them whatever the manifest says.
    pub strategy: Option<WasmStrategy>,
}

/// A `kind = "wasm"` policy as declared in a manifest, for the WebAssembly host to instantiate.
#[derive(Debug, Clone)]
pub struct WasmDecl {
    /// Id, description, mode, selector, event types.
    pub meta: PolicyMeta,
    /// The component file, resolved against the manifest's directory.
    pub component: PathBuf,
    /// Where `component = …` is written, for errors about the file.
    pub component_at: Diagnostic,
    /// What a failure turns into.
    pub on_error: OnError,
    /// Limits.
    pub limits: WasmLimits,
    /// The policy's `[policy.config]` table as JSON, handed to the guest.
    pub config_json: String,
}

/// What one policy file compiles to.
#[derive(Debug, Default)]
pub struct CompiledFile {
    /// TOML policies, ready to run.
    pub policies: Vec<Arc<dyn Policy>>,
    /// WebAssembly policies, to be instantiated by the host.
    pub wasm: Vec<WasmDecl>,
    /// Where tags come from (`[[tag]]` tables).
    pub tags: Vec<bursar_engine::TagSource>,
}

/// Compiles one policy file. `file` is the name used in diagnostics; `base_dir` resolves relative paths
/// (a WebAssembly component next to its manifest). Returns every error found in the file.
pub fn compile_str(file: &str, source: &str, base_dir: &std::path::Path) -> Result<CompiledFile, Vec<Diagnostic>> {
    compile::compile(file, source, base_dir)
}
