//! [`WasmPolicy`]: one loaded component as an engine [`Policy`], with its limits, its instance
//! strategy, its failure count and its quarantine.
//!
//! Every call gets a fresh fuel budget and epoch deadline. A failure (trap, deadline, fuel, memory cap,
//! an `Err` from the guest, an invalid verdict) drops the instance (a trapped instance refuses further
//! calls), is counted, and becomes the manifest's `on_error` outcome: for `job.submitted`, `deny` or
//! `allow` with a reason naming the policy and the failure; for other events an `alert` with that reason
//! (`skip` stays silent). After `max_failures` failures the policy is quarantined: the guest is no longer
//! called and every input gets the `on_error` outcome with a reason saying so.
//!
//! Only the guest's own failures count towards quarantine: otherwise one project could disarm a policy
//! for every project by sending events it cannot digest. So an input is sized before the call
//! ([`crate::convert::input_bytes`]): above `max_input_bytes` it never reaches the guest (the input gets
//! the `on_error` outcome, the policy is not charged); above `ordinary_input_bytes` a failure is
//! attributed to the input ([`InputFailure`]) and not counted; and a reused instance that took a large
//! input is retired after the call, so what that input left in its memory cannot fail the next,
//! ordinary call. A failure on an ordinary input (a trap, a timeout on a small event) is the guest's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bursar_engine::{Context, Output, Policy, PolicyMeta, Verdict, VerdictKind};
use bursar_lang::{OnError, WasmDecl};
use bursar_model::{EventKind, Hints};
use wasmtime::{Store, Trap};

use crate::bindings::Policy as WorldBindings;
use crate::bindings::bursar::policy::types as t;
use crate::host::{Compiled, Limiter, Limits, StoreData, Strategy, TICK};

/// The least deadline `init` gets when a policy is loaded.
const LOAD_DEADLINE_MS: u64 = 1000;

/// Why one call of a guest failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// It ran past its wall-clock deadline.
    #[error("exceeded its deadline of {0} ms")]
    Deadline(u64),
    /// It used up its fuel.
    #[error("ran out of fuel ({0} units)")]
    Fuel(u64),
    /// It tried to grow memory past the cap.
    #[error("exceeded its memory cap of {0} MiB")]
    Memory(u64),
    /// It trapped.
    #[error("trapped: {0}")]
    Trap(String),
    /// It returned an `Err`.
    #[error("reported an error: {0}")]
    Guest(String),
    /// It returned a value out of range.
    #[error("returned an invalid verdict: {0}")]
    BadOutput(String),
    /// It could not be instantiated or initialised.
    #[error("could not start: {0}")]
    Start(String),
}

/// A failure attributed to the input that caused it rather than to the guest: not counted towards
/// quarantine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFailure {
    /// The event's id.
    pub event_id: String,
    /// Bytes it would have handed the guest ([`crate::convert::input_bytes`]).
    pub bytes: u64,
    /// What the guest did with it; `None` when the input was too large to be passed at all.
    pub failure: Option<Failure>,
}

/// Why a call produced no verdicts.
enum CallError {
    /// A new instance could not be started (instantiation or `init`): never the input's doing.
    Start(Failure),
    /// The `evaluate` call on this input failed.
    Call(Failure),
}

/// The most a policy's guest has used so far, for sizing its manifest's `[policy.limits]`: a limit
/// should sit well above what a correct policy uses (see docs/wasm-policies.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The most fuel one start used: instantiation and `init`.
    pub init_fuel: u64,
    /// The most fuel one `evaluate` used.
    pub call_fuel: u64,
    /// The largest linear memory an instance was granted, in bytes.
    pub memory_bytes: u64,
}

/// A live instance of the component.
struct Worker {
    store: Store<StoreData>,
    bindings: WorldBindings,
}

/// A WebAssembly policy.
pub struct WasmPolicy {
    meta: PolicyMeta,
    compiled: Compiled,
    config_json: String,
    on_error: OnError,
    limits: Limits,
    strategy: Strategy,
    /// Idle instances (strategy [`Strategy::Reuse`]); a caller takes one and puts it back when healthy.
    idle: Mutex<Vec<Worker>>,
    failures: AtomicU64,
    last_failure: Mutex<Option<Failure>>,
    input_failures: AtomicU64,
    last_input_failure: Mutex<Option<InputFailure>>,
    peak_init_fuel: AtomicU64,
    peak_call_fuel: AtomicU64,
    peak_memory: AtomicU64,
}

impl std::fmt::Debug for WasmPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmPolicy")
            .field("id", &self.meta.id)
            .field("digest", &self.compiled.digest)
            .field("on_error", &self.on_error)
            .field("limits", &self.limits)
            .field("strategy", &self.strategy)
            .field("failures", &self.failures())
            .finish_non_exhaustive()
    }
}

impl WasmPolicy {
    /// Prepares the policy and checks that `init` accepts its config (the first instance is kept).
    pub(crate) fn new(
        decl: &WasmDecl,
        compiled: Compiled,
        limits: Limits,
        strategy: Strategy,
    ) -> Result<WasmPolicy, String> {
        let mut meta = decl.meta.clone();
        meta.kind = "wasm";
        let config_json = if decl.config_json.trim().is_empty() { "{}".to_owned() } else { decl.config_json.clone() };
        let p = WasmPolicy {
            meta,
            compiled,
            config_json,
            on_error: decl.on_error,
            limits,
            strategy,
            idle: Mutex::new(Vec::new()),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            input_failures: AtomicU64::new(0),
            last_input_failure: Mutex::new(None),
            peak_init_fuel: AtomicU64::new(0),
            peak_call_fuel: AtomicU64::new(0),
            peak_memory: AtomicU64::new(0),
        };
        // At load, compile-time page faults and a busy machine are not the guest's fault: `init` gets at
        // least a second.
        let worker = p.start(limits.deadline_ms.max(LOAD_DEADLINE_MS)).map_err(|f| f.to_string())?;
        if strategy == Strategy::Reuse
            && let Ok(mut idle) = p.idle.lock()
        {
            idle.push(worker);
        }
        Ok(p)
    }

    /// SHA-256 of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.compiled.digest
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The instance strategy in force.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The most the guest has used so far (successful starts and calls only).
    pub fn usage(&self) -> Usage {
        Usage {
            init_fuel: self.peak_init_fuel.load(Ordering::Relaxed),
            call_fuel: self.peak_call_fuel.load(Ordering::Relaxed),
            memory_bytes: self.peak_memory.load(Ordering::Relaxed),
        }
    }

    /// Records the fuel `store` used since it was armed, and its peak memory, into `peak_fuel`.
    fn record(&self, store: &Store<StoreData>, peak_fuel: &AtomicU64) {
        let used = self.limits.fuel.saturating_sub(store.get_fuel().unwrap_or(self.limits.fuel));
        peak_fuel.fetch_max(used, Ordering::Relaxed);
        self.peak_memory.fetch_max(store.data().limiter.peak as u64, Ordering::Relaxed);
    }

    /// True once the policy has failed `max_failures` times; the guest is no longer called.
    pub fn quarantined(&self) -> bool {
        self.failures() >= u64::from(self.limits.max_failures)
    }

    /// The most recent failure that was the guest's own (the kind that counts towards quarantine).
    pub fn last_failure(&self) -> Option<Failure> {
        self.last_failure.lock().ok().and_then(|f| f.clone())
    }

    /// Inputs that got the `on_error` outcome because of their size: too large to pass, or large and
    /// failed. Not counted in [`Policy::failures`].
    pub fn input_failures(&self) -> u64 {
        self.input_failures.load(Ordering::Relaxed)
    }

    /// The most recent of [`WasmPolicy::input_failures`], with the event it was about.
    pub fn last_input_failure(&self) -> Option<InputFailure> {
        self.last_input_failure.lock().ok().and_then(|f| f.clone())
    }

    fn record_input_failure(&self, f: InputFailure) {
        self.input_failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_input_failure.lock() {
            *last = Some(f);
        }
    }

    fn arm(&self, store: &mut Store<StoreData>, deadline_ms: u64) -> Result<(), Failure> {
        store.set_fuel(self.limits.fuel).map_err(|e| Failure::Start(e.to_string()))?;
        let ticks = deadline_ms.div_ceil(TICK.as_millis().max(1) as u64).max(1);
        // One tick more: the current tick may be about to end.
        store.set_epoch_deadline(ticks + 1);
        store.data_mut().limiter.hit = false;
        Ok(())
    }

    /// A new instance with `init` run, within `deadline_ms`.
    fn start(&self, deadline_ms: u64) -> Result<Worker, Failure> {
        let engine = self.compiled.pre.engine();
        let data = StoreData {
            limiter: Limiter {
                max_memory: usize::try_from(self.limits.memory_mb << 20).unwrap_or(usize::MAX),
                hit: false,
                peak: 0,
            },
        };
        let mut store = Store::new(engine, data);
        store.limiter(|d| &mut d.limiter);
        self.arm(&mut store, deadline_ms)?;
        let bindings = match self.compiled.pre.instantiate(&mut store) {
            Ok(b) => b,
            Err(e) => return Err(self.classify(&store, e, Failure::Start)),
        };
        match bindings.call_init(&mut store, &self.config_json) {
            Ok(Ok(())) => {
                self.record(&store, &self.peak_init_fuel);
                Ok(Worker { store, bindings })
            }
            Ok(Err(m)) => Err(Failure::Start(format!("`init` rejected the config: {m}"))),
            Err(e) => Err(self.classify(&store, e, |m| Failure::Start(format!("`init` failed: {m}")))),
        }
    }

    fn classify(&self, store: &Store<StoreData>, e: wasmtime::Error, other: impl Fn(String) -> Failure) -> Failure {
        if store.data().limiter.hit {
            return Failure::Memory(self.limits.memory_mb);
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Failure::Deadline(self.limits.deadline_ms),
            Some(Trap::OutOfFuel) => Failure::Fuel(self.limits.fuel),
            Some(trap) => {
                let m = trap.to_string();
                Failure::Trap(m.strip_prefix("wasm trap: ").unwrap_or(&m).to_owned())
            }
            None => other(format!("{e:#}")),
        }
    }

    /// Runs the guest on one event; `ordinary` says whether the input is of ordinary size.
    fn call(&self, event: t::Event<'_>, cx: &Context<'_>, ordinary: bool) -> Result<Vec<Verdict>, CallError> {
        let taken = match self.strategy {
            Strategy::Reuse => self.idle.lock().ok().and_then(|mut idle| idle.pop()),
            Strategy::Fresh => None,
        };
        let mut worker = match taken {
            Some(w) => w,
            None => self.start(self.limits.deadline_ms).map_err(CallError::Start)?,
        };
        self.arm(&mut worker.store, self.limits.deadline_ms).map_err(CallError::Start)?;
        let result = crate::state::CURRENT.set(cx.state, || worker.bindings.call_evaluate(&mut worker.store, event));
        let verdicts = match result {
            Ok(Ok(vs)) => {
                self.record(&worker.store, &self.peak_call_fuel);
                crate::convert::verdicts(vs, cx.event.time).map_err(CallError::Call)?
            }
            Ok(Err(m)) => return Err(CallError::Call(Failure::Guest(m))),
            // A trap poisons the instance (it refuses further calls), and an error that is not a trap
            // comes from lifting the guest's result (an invalid discriminant, string or pointer): either
            // way the instance is dropped.
            Err(e) => return Err(CallError::Call(self.classify(&worker.store, e, Failure::BadOutput))),
        };
        // A reused instance whose memory has passed three quarters of the cap is retired, not put back:
        // linear memory never shrinks, and a guest whose heap creeps up with every call (the JavaScript
        // engine of componentize-js grows by about 0.8 KiB a call) would otherwise hit the cap in the
        // middle of a call, fail and be quarantined. The next call starts a new instance with `init`.
        // An instance that took a large input is retired too: what that input left behind (a grown heap,
        // a full bump allocator) must not make the next, ordinary call fail and be charged to the guest.
        let retire = !ordinary || worker.store.data().limiter.peak > worker.store.data().limiter.max_memory / 4 * 3;
        if self.strategy == Strategy::Reuse
            && !retire
            && let Ok(mut idle) = self.idle.lock()
        {
            idle.push(worker);
        }
        Ok(verdicts)
    }

    /// The `on_error` outcome for an input too large to hand the guest (not a failure of the policy).
    fn refuse_input(&self, cx: &Context<'_>, out: &mut Output, bytes: u64) {
        let reason = format!(
            "wasm policy {} was not called: event `{}` would pass {bytes} bytes to it, more than the {} a call may pass (on_error = {}); not counted as a failure of the policy",
            self.meta.id,
            cx.event.id,
            self.limits.max_input_bytes,
            self.on_error_word()
        );
        self.record_input_failure(InputFailure { event_id: cx.event.id.clone(), bytes, failure: None });
        self.fallback(cx, out, reason);
    }

    /// The `on_error` outcome for an input, with `reason`.
    fn fallback(&self, cx: &Context<'_>, out: &mut Output, reason: String) {
        let admission = matches!(cx.event.kind, EventKind::JobSubmitted(_));
        let kind = match (self.on_error, admission) {
            (OnError::Skip, _) => return,
            (OnError::Deny, true) => VerdictKind::Deny,
            (OnError::Allow, true) => VerdictKind::Allow(Hints::default()),
            (_, false) => VerdictKind::Alert,
        };
        out.verdict(Verdict::new(kind, reason));
    }

    fn on_error_word(&self) -> &'static str {
        match self.on_error {
            OnError::Deny => "deny",
            OnError::Allow => "allow",
            OnError::Skip => "skip",
        }
    }
}

impl Policy for WasmPolicy {
    fn meta(&self) -> &PolicyMeta {
        &self.meta
    }

    fn evaluate(&self, cx: &Context<'_>, out: &mut Output) {
        let id = &self.meta.id;
        if self.quarantined() {
            let last = self.last_failure().map(|f| format!("; last failure: it {f}")).unwrap_or_default();
            let reason = format!(
                "wasm policy {id} is quarantined after {} failures{last} (on_error = {})",
                self.failures(),
                self.on_error_word()
            );
            self.fallback(cx, out, reason);
            return;
        }
        // Size the input before building it: the raw line alone may be far over the limit.
        let raw = cx.raw.map_or(0, |r| r.len() as u64);
        if raw > self.limits.max_input_bytes {
            self.refuse_input(cx, out, raw);
            return;
        }
        let extras = crate::convert::Extras::of(cx);
        let Some(event) = crate::convert::event(cx, &extras) else { return };
        let bytes = crate::convert::input_bytes(&event);
        if bytes > self.limits.max_input_bytes {
            self.refuse_input(cx, out, bytes);
            return;
        }
        let ordinary = bytes <= self.limits.ordinary_input_bytes;
        match self.call(event, cx, ordinary) {
            Ok(verdicts) => {
                for v in verdicts {
                    out.verdict(v);
                }
            }
            Err(CallError::Call(failure)) if !ordinary => {
                let reason = format!(
                    "wasm policy {id} {failure} on event `{}` of {bytes} bytes (on_error = {}); attributed to the input, larger than the {} bytes of an ordinary one, and not counted as a failure of the policy",
                    cx.event.id,
                    self.on_error_word(),
                    self.limits.ordinary_input_bytes
                );
                self.record_input_failure(InputFailure {
                    event_id: cx.event.id.clone(),
                    bytes,
                    failure: Some(failure),
                });
                self.fallback(cx, out, reason);
            }
            Err(CallError::Call(failure) | CallError::Start(failure)) => {
                let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                let quarantine = if n >= u64::from(self.limits.max_failures) {
                    format!("; quarantined after {n} failures")
                } else {
                    String::new()
                };
                let reason = format!("wasm policy {id} {failure} (on_error = {}){quarantine}", self.on_error_word());
                if let Ok(mut last) = self.last_failure.lock() {
                    *last = Some(failure);
                }
                self.fallback(cx, out, reason);
            }
        }
    }

    fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}
