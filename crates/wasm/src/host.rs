//! [`WasmHost`]: one wasmtime engine, a linker with the `bursar:policy/state` imports, a cache of
//! compiled components keyed by content digest, and the epoch ticker that enforces wall-clock deadlines.
//!
//! Compiling a component takes milliseconds to seconds; a reload that finds the same bytes reuses the
//! compiled component and its pre-resolved imports (`PolicyPre`). Keep one host for the life of the
//! process (see [`WasmHost::shared`]) so reloads hit the cache.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration as StdDuration;

use bursar_engine::Policy;
use bursar_lang::{Diagnostic, WasmDecl};
use bursar_loader::ComponentHost;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter};

use crate::bindings::{Policy as WorldBindings, PolicyPre};
use crate::policy::WasmPolicy;

/// How often the epoch ticker advances the engine's epoch; deadlines are counted in these ticks.
pub const TICK: StdDuration = StdDuration::from_millis(1);

/// How guest instances are used across calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// One instance per worker, initialised once and reused for every call; replaced after any failure.
    /// About 30 times cheaper per call (see `docs/perf/wasm.md`).
    #[default]
    Reuse,
    /// A fresh store and instance from the pre-instantiated template for every call (`init` runs each
    /// time), with the pooling allocator. No guest memory survives a call.
    Fresh,
}

/// Per-call limits; a manifest's `[policy.limits]` overrides each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline per call, in milliseconds.
    pub deadline_ms: u64,
    /// Fuel (about one unit per WebAssembly instruction) per call.
    pub fuel: u64,
    /// Linear memory cap, in MiB.
    pub memory_mb: u64,
    /// Failures before the policy is quarantined. Only the guest's own failures count (see
    /// `ordinary_input_bytes`).
    pub max_failures: u32,
    /// The most bytes of input one call may hand the guest: the raw line plus every string of the
    /// event record. A larger event never reaches the guest: it gets the `on_error` outcome, and it
    /// is not counted as a failure of the policy. [`Limits::with`] caps this at an eighth of the
    /// memory cap, so an input that is let through always fits.
    pub max_input_bytes: u64,
    /// Inputs up to this size are ordinary: a failure on one (a trap, a timeout, the memory cap) is
    /// the guest's own and counts towards quarantine. A failure on a larger input is attributed to
    /// that input: the input gets the `on_error` outcome, the policy stays in service.
    pub ordinary_input_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            deadline_ms: 20,
            fuel: 10_000_000,
            memory_mb: 16,
            max_failures: 10,
            max_input_bytes: 1 << 20,
            ordinary_input_bytes: 16 << 10,
        }
    }
}

impl Limits {
    /// These defaults with the manifest's overrides applied.
    pub fn with(self, o: &bursar_lang::WasmLimits) -> Limits {
        Limits {
            deadline_ms: o.deadline_ms.unwrap_or(self.deadline_ms),
            fuel: o.fuel.unwrap_or(self.fuel),
            memory_mb: o.memory_mb.unwrap_or(self.memory_mb),
            max_failures: o.max_failures.unwrap_or(self.max_failures),
            max_input_bytes: self.max_input_bytes,
            ordinary_input_bytes: self.ordinary_input_bytes,
        }
        .clamped()
    }

    /// These limits with the input limits made consistent: at most an eighth of the memory cap may
    /// be input, and an ordinary input is never above the maximum.
    pub fn clamped(mut self) -> Limits {
        let memory = self.memory_mb.saturating_mul(1 << 20);
        self.max_input_bytes = self.max_input_bytes.min(memory / 8);
        self.ordinary_input_bytes = self.ordinary_input_bytes.min(self.max_input_bytes);
        self
    }
}

/// How a [`WasmHost`] is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostConfig {
    /// Instance strategy.
    pub strategy: Strategy,
    /// Default limits.
    pub limits: Limits,
}

/// Why a host could not be created.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// wasmtime refused the configuration.
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
}

/// What a store carries: the memory limiter. Engine state reaches host functions through
/// [`crate::state`], never through the store.
#[derive(Debug)]
pub struct StoreData {
    pub(crate) limiter: Limiter,
}

/// A memory and table cap that remembers whether the guest hit it, so the failure can say so.
#[derive(Debug)]
pub(crate) struct Limiter {
    pub(crate) max_memory: usize,
    pub(crate) hit: bool,
    /// The largest linear memory this instance was granted, in bytes (see [`crate::Usage`]).
    pub(crate) peak: usize,
}

const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            self.hit = true;
            wasmtime::bail!("memory cap of {} MiB reached (asked for {desired} bytes)", self.max_memory >> 20);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// A compiled component, ready to instantiate.
#[derive(Clone)]
pub(crate) struct Compiled {
    pub(crate) pre: PolicyPre<StoreData>,
    pub(crate) digest: String,
}

/// The WebAssembly policy host. Implements [`ComponentHost`] for the loader.
pub struct WasmHost {
    engine: Engine,
    linker: Linker<StoreData>,
    cache: Mutex<HashMap<String, Compiled>>,
    config: HostConfig,
}

impl std::fmt::Debug for WasmHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmHost").field("config", &self.config).finish_non_exhaustive()
    }
}

impl WasmHost {
    /// A host with `config`, and its epoch ticker thread.
    pub fn new(config: HostConfig) -> Result<WasmHost, HostError> {
        let mut cfg = Config::new();
        cfg.consume_fuel(true);
        cfg.epoch_interruption(true);
        if config.strategy == Strategy::Fresh {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(256);
            pool.total_core_instances(256);
            pool.total_memories(256);
            pool.total_tables(256);
            pool.max_memory_size(1 << 30);
            cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&cfg).map_err(|e| HostError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        WorldBindings::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |s| s)
            .map_err(|e| HostError::Engine(e.to_string()))?;
        start_ticker(&engine).map_err(|e| HostError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(WasmHost { engine, linker, cache: Mutex::new(HashMap::new()), config })
    }

    /// The process-wide host with default settings, created on first use; reloads share its cache.
    pub fn shared() -> Result<&'static WasmHost, HostError> {
        static SHARED: OnceLock<WasmHost> = OnceLock::new();
        if let Some(h) = SHARED.get() {
            return Ok(h);
        }
        let host = WasmHost::new(HostConfig::default())?;
        Ok(SHARED.get_or_init(|| host))
    }

    /// The settings.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Number of compiled components in the cache.
    pub fn cached(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    /// Compiles `bytes` (a component, or a core module carrying its WIT world) or fetches it from the
    /// cache by SHA-256 digest.
    pub(crate) fn compile(&self, bytes: &[u8]) -> Result<Compiled, String> {
        let digest = bursar_loader::sha256_hex(bytes);
        if let Some(c) = self.cache.lock().ok().and_then(|c| c.get(&digest).cloned()) {
            return Ok(c);
        }
        let component_bytes;
        let bytes = if is_core_module(bytes) {
            component_bytes = componentize(bytes)?;
            &component_bytes[..]
        } else {
            bytes
        };
        let component = Component::new(&self.engine, bytes).map_err(|e| format!("not a valid component: {e:#}"))?;
        let inst_pre = self.linker.instantiate_pre(&component).map_err(|e| {
            format!(
                "the component's imports cannot be satisfied ({e:#}); a policy may import only `bursar:policy/state`"
            )
        })?;
        let pre = PolicyPre::new(inst_pre)
            .map_err(|e| format!("the component does not export the `bursar:policy/policy` world: {e:#}"))?;
        let compiled = Compiled { pre, digest: digest.clone() };
        if let Ok(mut c) = self.cache.lock() {
            c.insert(digest, compiled.clone());
        }
        Ok(compiled)
    }

    /// Loads the policy a manifest declares: reads and compiles its component, runs `init`, applies limits.
    pub fn load(&self, decl: &WasmDecl) -> Result<Arc<WasmPolicy>, Diagnostic> {
        let err = |message: String, help: &str| {
            let mut d = decl.component_at.clone();
            d.message = message;
            d.with_help(help)
        };
        let bytes = std::fs::read(&decl.component).map_err(|e| {
            err(
                format!("cannot read component `{}`: {e}", decl.component.display()),
                "build the example policies with `scripts/build-wasm.sh`, or fix the `component` path",
            )
        })?;
        self.load_bytes(decl, &bytes).map_err(|m| {
            err(
                format!("component `{}`: {m}", display(&decl.component)),
                "build the policy with the bursar-guest SDK; see docs/wasm-policies.md",
            )
        })
    }

    /// Like [`WasmHost::load`] with the component's bytes given.
    pub fn load_bytes(&self, decl: &WasmDecl, bytes: &[u8]) -> Result<Arc<WasmPolicy>, String> {
        let compiled = self.compile(bytes)?;
        let limits = self.config.limits.with(&decl.limits);
        WasmPolicy::new(decl, compiled, limits, self.strategy_for(decl)).map(Arc::new)
    }

    /// The strategy a policy runs with: fresh instances when the host or the manifest
    /// (`strategy = "fresh"` in `[policy.limits]`) asks for them, else reuse. A manifest cannot weaken a
    /// host built for fresh instances.
    pub fn strategy_for(&self, decl: &WasmDecl) -> Strategy {
        match (self.config.strategy, decl.limits.strategy) {
            (Strategy::Fresh, _) | (_, Some(bursar_lang::WasmStrategy::Fresh)) => Strategy::Fresh,
            _ => Strategy::Reuse,
        }
    }
}

impl ComponentHost for WasmHost {
    fn instantiate(&self, decl: &WasmDecl) -> Result<Arc<dyn Policy>, Diagnostic> {
        self.load(decl).map(|p| p as Arc<dyn Policy>)
    }

    fn instantiate_bytes(&self, decl: &WasmDecl, bytes: &[u8]) -> Result<Arc<dyn Policy>, Diagnostic> {
        self.load_bytes(decl, bytes).map(|p| p as Arc<dyn Policy>).map_err(|m| {
            let mut d = decl.component_at.clone();
            d.message = format!("component `{}`: {m}", display(&decl.component));
            d.with_help("build the policy with the bursar-guest SDK; see docs/wasm-policies.md")
        })
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// True for a core WebAssembly module (version 1), false for a component or anything else.
pub fn is_core_module(bytes: &[u8]) -> bool {
    bytes.get(..8) == Some(b"\0asm\x01\0\0\0")
}

/// Wraps a core module built by `wit-bindgen` for `wasm32-unknown-unknown` into a component, using the
/// WIT world embedded in its `component-type` custom section.
pub fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| format!("cannot wrap the core module into a component: {e:#}"))
}

/// Starts a thread that advances `engine`'s epoch every [`TICK`] for as long as the engine exists.
fn start_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new().name("bursar-wasm-epoch".to_owned()).spawn(move || {
        loop {
            std::thread::sleep(TICK);
            match weak.upgrade() {
                Some(e) => e.increment_epoch(),
                None => break,
            }
        }
    })?;
    Ok(())
}
