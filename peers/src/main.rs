//! One admission policy in six engines, the same generated requests, one run.
//!
//! The policy (see `policy/`): readiness (image, data and script declared ready), a project GPU-hour
//! quota (20,000 per month, reserved at admission), memory fit (params × 2 bytes × 1.2 / GPUs ≤ GPU
//! memory), a per-queue cap on the GPUs a project holds (32 in `short`, 256 in `long`), and approval for
//! jobs over 32 GPUs or 48 hours. Any deny wins, then require-approval, else allow.
//!
//! Engines: bursar (the TOML policy, run by the real engine with its own state), bursar with the same
//! policy as a WebAssembly component (a Rust guest in `policy/wasm-admission/`, built for
//! `wasm32-unknown-unknown` by this binary and run by the engine through `bursar-wasm`; it asks the
//! engine's state through the WIT `state` queries), the plain Rust function (the floor), Cedar
//! (`cedar-policy`), Regorus's interpreter and Regorus's compiled VM (RVM). Cedar and Regorus are
//! stateless, so the project's usage and the GPUs it holds in the queue travel in each request; bursar
//! looks them up in its own state.
//!
//! The WIT `state` interface answers GPUs held per ledger (project, user, tag pair) but not per queue, so
//! the WebAssembly row replays a copy of the stream whose submissions carry the tag
//! `project_queue = "<project>/<queue>"`, and the guest reads that tag pair's ledger. The engine then
//! keeps one more ledger per job; the TOML policy is also timed on that tagged copy, so the WebAssembly
//! versus TOML ratio compares identical work apart from the policy call.
//!
//! The requests are built by replaying a generated stream (`bursar gen`'s model: submissions, starts, finishes) through bursar and reading its
//! state just before each submission, so every engine sees exactly what bursar saw.
//!
//! Every engine is checked against the plain function on every request; any disagreement is printed
//! and the process exits 1. Then each engine is timed over all requests for several rounds.
//!
//! Run: `cd peers && cargo run --release -- [--requests N] [--rounds R] [--seed S]`. The guest is built
//! with `$CARGO build --release --target wasm32-unknown-unknown` into `$BURSAR_GUEST_TARGET` (default
//! `peers/target/wasm-guests`) and copied to `policy/wasm-admission.wasm`; `--no-guest-build` skips that
//! step and loads the `.wasm` already there.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bursar_engine::{Engine, PolicySet, ScopeKind};
use bursar_model::{DecisionKind, Event, EventKind, JobSpec, Period};
use bursar_traces::workload::{GenConfig, Generator};

const QUOTA_GPU_HOURS: f64 = 20_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dec {
    Allow,
    Deny,
    RequireApproval,
}

/// One admission request with the usage a stateless engine needs.
#[derive(Debug, Clone, PartialEq)]
struct Req {
    gpus: u32,
    hours: f64,
    mem_gb: f64,
    params_b: f64,
    ready: [bool; 3],
    used_gpu_hours: f64,
    queue_held: u32,
    queue_cap: u32,
}

fn queue_cap(q: Option<&str>) -> u32 {
    match q {
        Some("short") => 32,
        Some("long") => 256,
        _ => u32::MAX,
    }
}

/// The floor: the policy as a plain Rust function.
fn floor(r: &Req) -> Dec {
    let not_ready = !(r.ready[0] && r.ready[1] && r.ready[2]);
    let over_quota = r.used_gpu_hours + f64::from(r.gpus) * r.hours > QUOTA_GPU_HOURS + 1e-9;
    let no_fit = r.params_b * 2.0 * 1.2 / f64::from(r.gpus.max(1)) > r.mem_gb;
    let queue_full = u64::from(r.queue_held) + u64::from(r.gpus) > u64::from(r.queue_cap);
    if not_ready || over_quota || no_fit || queue_full {
        Dec::Deny
    } else if r.gpus > 32 || r.hours > 48.0 {
        Dec::RequireApproval
    } else {
        Dec::Allow
    }
}

fn milli(v: f64) -> i64 {
    (v * 1000.0).round() as i64
}

// ---------------------------------------------------------------------------------------------------
// Requests: replay the generated stream through bursar, reading its state before each submission.

struct Recorded {
    reqs: Vec<Req>,
    bursar: Vec<Dec>,
    events: Vec<Event>,
    /// Submissions whose `project_queue` tag ledger held a different number of GPUs than the project
    /// ledger's count for the queue (always 0; checked because the WebAssembly row relies on it).
    tag_mismatches: usize,
}

/// The tag that carries `<project>/<queue>` in the WebAssembly row's stream (see `tagged`).
const QUEUE_TAG: &str = "project_queue";

/// A copy of the stream whose submissions carry `project_queue = "<project>/<queue>"`, so a WebAssembly
/// policy can read the GPUs a project holds in a queue as that tag pair's ledger (the WIT `state`
/// interface has no per-queue query).
fn tagged(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if let EventKind::JobSubmitted(j) = &mut e.kind
                && let Some(q) = &j.queue
            {
                let value = format!("{}/{q}", j.project);
                j.tags.push((QUEUE_TAG.to_owned(), value));
                j.tags.sort();
            }
            e
        })
        .collect()
}

fn stream(requests: usize, seed: u64) -> Vec<Event> {
    let cfg = GenConfig { jobs: requests as u64, projects: 16, seed, ..GenConfig::default() };
    Generator::new(cfg)
        .filter(|e| {
            matches!(e.kind, EventKind::JobSubmitted(_) | EventKind::JobStarted { .. } | EventKind::JobFinished { .. })
        })
        .map(|mut e| {
            // Integral sizes so Cedar (no floats) sees exact values: params in tenths of a billion.
            if let EventKind::JobSubmitted(j) = &mut e.kind {
                j.model_params_b = j.model_params_b.map(|p| (p * 10.0).round() / 10.0);
            }
            e
        })
        .collect()
}

fn to_req(j: &JobSpec, state: &bursar_engine::State, e: &Event) -> Req {
    let used = state.usage(ScopeKind::Project, &j.project, Period::Month, e.time).by_runtime();
    let held = match &j.queue {
        Some(q) => state.ledger(ScopeKind::Project, &j.project).map_or(0, |l| l.queue_gpus(q)),
        None => 0,
    };
    Req {
        gpus: j.gpus,
        hours: j.requested_hours,
        mem_gb: j.gpu_mem_gb.unwrap_or(0.0),
        params_b: j.model_params_b.unwrap_or(0.0),
        ready: [j.ready.image == Some(true), j.ready.data == Some(true), j.ready.script == Some(true)],
        used_gpu_hours: used,
        queue_held: held,
        queue_cap: queue_cap(j.queue.as_deref()),
    }
}

fn admission(out: &[bursar_model::Decision]) -> Option<Dec> {
    out.iter().find(|d| d.admission && !d.dry_run).map(|d| match d.decision {
        DecisionKind::Allow => Dec::Allow,
        DecisionKind::RequireApproval => Dec::RequireApproval,
        _ => Dec::Deny,
    })
}

fn record(set: &Arc<PolicySet>, events: Vec<Event>) -> Recorded {
    let mut engine = Engine::new(set.clone());
    let mut out = Vec::new();
    let (mut reqs, mut bursar) = (Vec::new(), Vec::new());
    let mut tag_mismatches = 0;
    for e in &events {
        if let EventKind::JobSubmitted(j) = &e.kind {
            let r = to_req(j, engine.state(), e);
            if let Some(v) = j.tag(QUEUE_TAG) {
                let ledger = format!("{QUEUE_TAG}={v}");
                let held = engine.state().ledger(ScopeKind::Tag, &ledger).map_or(0, |l| l.held_gpus);
                tag_mismatches += usize::from(held != r.queue_held);
            }
            reqs.push(r);
        }
        out.clear();
        engine.process(e, None, &mut out);
        if matches!(e.kind, EventKind::JobSubmitted(_)) {
            bursar.push(admission(&out).unwrap_or(Dec::Deny));
        }
    }
    Recorded { reqs, bursar, events, tag_mismatches }
}

/// bursar with its own state: replays the stream, timing only the submissions (each timed alone,
/// minus the measured cost of reading the clock).
fn time_bursar(set: &Arc<PolicySet>, events: &[Event], clock_ns: f64) -> (Duration, usize) {
    let mut engine = Engine::new(set.clone());
    let mut out = Vec::with_capacity(8);
    let mut total = Duration::ZERO;
    let mut n = 0usize;
    for e in events {
        out.clear();
        if matches!(e.kind, EventKind::JobSubmitted(_)) {
            let t = Instant::now();
            black_box(engine.process(e, None, &mut out));
            total += t.elapsed();
            n += 1;
        } else {
            engine.process(e, None, &mut out);
        }
    }
    let corrected = total.as_nanos() as f64 - clock_ns * n as f64;
    (Duration::from_nanos(corrected.max(0.0) as u64), n)
}

fn clock_overhead_ns() -> f64 {
    let n = 200_000u32;
    let mut total = Duration::ZERO;
    for _ in 0..n {
        let t = Instant::now();
        total += black_box(t.elapsed());
    }
    total.as_nanos() as f64 / f64::from(n)
}

// ---------------------------------------------------------------------------------------------------
// The WebAssembly guest: built from source on every run (a no-op when up to date).

const GUEST_TARGET: &str = "wasm32-unknown-unknown";

/// Builds `policy/wasm-admission/` for `wasm32-unknown-unknown` with the cargo that runs this binary and
/// copies the core module to `policy/wasm-admission.wasm`, where `admission-wasm.toml` points; the host
/// wraps it into a component when it loads it.
fn build_guest(policy_dir: &Path) -> Result<(), String> {
    let manifest = policy_dir.join("wasm-admission").join("Cargo.toml");
    let target_dir = std::env::var_os("BURSAR_GUEST_TARGET")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("wasm-guests"), PathBuf::from);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let by_hand = format!(
        "rustup target add {GUEST_TARGET} && CARGO_TARGET_DIR={dir} cargo build --release --target {GUEST_TARGET} \
         --manifest-path {manifest} && cp {dir}/{GUEST_TARGET}/release/bursar_peers_admission.wasm {out}\n\
         and run again with --no-guest-build",
        dir = target_dir.display(),
        manifest = manifest.display(),
        out = policy_dir.join("wasm-admission.wasm").display(),
    );
    eprintln!("building the WebAssembly guest (policy/wasm-admission, {GUEST_TARGET}) into {}", target_dir.display());
    let status = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--target", GUEST_TARGET, "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .map_err(|e| format!("cannot run {}: {e}; build the guest by hand:\n    {by_hand}", cargo.to_string_lossy()))?;
    if !status.success() {
        return Err(format!(
            "building the WebAssembly guest failed ({status}); is the {GUEST_TARGET} target installed? \
             Build it by hand:\n    {by_hand}"
        ));
    }
    let built = target_dir.join(GUEST_TARGET).join("release").join("bursar_peers_admission.wasm");
    std::fs::copy(&built, policy_dir.join("wasm-admission.wasm"))
        .map(|_| ())
        .map_err(|e| format!("cannot copy {}: {e}; build the guest by hand:\n    {by_hand}", built.display()))
}

// ---------------------------------------------------------------------------------------------------
// Cedar

struct Cedar {
    policies: cedar_policy::PolicySet,
    authorizer: cedar_policy::Authorizer,
    entities: cedar_policy::Entities,
    principal: cedar_policy::EntityUid,
    action: cedar_policy::EntityUid,
    resource: cedar_policy::EntityUid,
    approval: cedar_policy::PolicyId,
}

impl Cedar {
    fn new(src: &str) -> Result<Cedar, String> {
        let uid = |s: &str| cedar_policy::EntityUid::from_str(s).map_err(|e| e.to_string());
        Ok(Cedar {
            policies: cedar_policy::PolicySet::from_str(src).map_err(|e| format!("{e:?}"))?,
            authorizer: cedar_policy::Authorizer::new(),
            entities: cedar_policy::Entities::empty(),
            principal: uid(r#"User::"submitter""#)?,
            action: uid(r#"Action::"submit""#)?,
            resource: uid(r#"Job::"job""#)?,
            approval: cedar_policy::PolicyId::new("policy5"),
        })
    }

    fn request(&self, r: &Req) -> Result<cedar_policy::Request, String> {
        use cedar_policy::RestrictedExpression as X;
        let ctx = cedar_policy::Context::from_pairs([
            ("ready_image".to_owned(), X::new_bool(r.ready[0])),
            ("ready_data".to_owned(), X::new_bool(r.ready[1])),
            ("ready_script".to_owned(), X::new_bool(r.ready[2])),
            ("gpus".to_owned(), X::new_long(i64::from(r.gpus))),
            ("hours_m".to_owned(), X::new_long(milli(r.hours))),
            ("used_m".to_owned(), X::new_long(milli(r.used_gpu_hours))),
            ("quota_m".to_owned(), X::new_long(milli(QUOTA_GPU_HOURS))),
            ("params_x10".to_owned(), X::new_long((r.params_b * 10.0).round() as i64)),
            ("mem_gb".to_owned(), X::new_long(r.mem_gb.round() as i64)),
            ("queue_held".to_owned(), X::new_long(i64::from(r.queue_held))),
            ("queue_cap".to_owned(), X::new_long(i64::from(r.queue_cap.min(1 << 30)))),
        ])
        .map_err(|e| e.to_string())?;
        cedar_policy::Request::new(self.principal.clone(), self.action.clone(), self.resource.clone(), ctx, None)
            .map_err(|e| e.to_string())
    }

    fn decide(&self, req: &cedar_policy::Request) -> Dec {
        let resp = self.authorizer.is_authorized(req, &self.policies, &self.entities);
        match resp.decision() {
            cedar_policy::Decision::Allow => Dec::Allow,
            cedar_policy::Decision::Deny => {
                if resp.diagnostics().reason().all(|p| *p == self.approval) && resp.diagnostics().reason().count() > 0 {
                    Dec::RequireApproval
                } else {
                    Dec::Deny
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Regorus

fn rego_input(r: &Req) -> regorus::Value {
    let mut m = std::collections::BTreeMap::new();
    let b = |v: bool| regorus::Value::from(v);
    let n = |v: i64| regorus::Value::from(v);
    m.insert(regorus::Value::from("ready_image"), b(r.ready[0]));
    m.insert(regorus::Value::from("ready_data"), b(r.ready[1]));
    m.insert(regorus::Value::from("ready_script"), b(r.ready[2]));
    m.insert(regorus::Value::from("gpus"), n(i64::from(r.gpus)));
    m.insert(regorus::Value::from("hours_m"), n(milli(r.hours)));
    m.insert(regorus::Value::from("used_m"), n(milli(r.used_gpu_hours)));
    m.insert(regorus::Value::from("quota_m"), n(milli(QUOTA_GPU_HOURS)));
    m.insert(regorus::Value::from("params_x10"), n((r.params_b * 10.0).round() as i64));
    m.insert(regorus::Value::from("mem_gb"), n(r.mem_gb.round() as i64));
    m.insert(regorus::Value::from("queue_held"), n(i64::from(r.queue_held)));
    m.insert(regorus::Value::from("queue_cap"), n(i64::from(r.queue_cap.min(1 << 30))));
    regorus::Value::from(m)
}

fn rego_dec(v: &regorus::Value) -> Dec {
    match v.as_string().map(|s| s.as_ref().to_owned()).unwrap_or_default().as_str() {
        "allow" => Dec::Allow,
        "require_approval" => Dec::RequireApproval,
        _ => Dec::Deny,
    }
}

const ENTRY: &str = "data.bursar.decision";

struct Rego {
    compiled: regorus::CompiledPolicy,
    vm: regorus::rvm::RegoVM,
}

impl Rego {
    fn new(src: &str) -> Result<Rego, String> {
        let mut engine = regorus::Engine::new();
        engine.add_policy("admission.rego".to_owned(), src.to_owned()).map_err(|e| e.to_string())?;
        let entry: regorus::Rc<str> = ENTRY.into();
        let compiled = engine.compile_with_entrypoint(&entry).map_err(|e| e.to_string())?;
        let program = regorus::languages::rego::compiler::Compiler::compile_from_policy(&compiled, &[ENTRY])
            .map_err(|e| e.to_string())?;
        let mut vm = regorus::rvm::RegoVM::new();
        vm.load_program(program);
        Ok(Rego { compiled, vm })
    }

    fn interp(&self, input: regorus::Value) -> Dec {
        match self.compiled.eval_with_input(input) {
            Ok(v) => rego_dec(&v),
            Err(_) => Dec::Deny,
        }
    }

    fn rvm(&mut self, input: regorus::Value) -> Dec {
        self.vm.set_input(input);
        match self.vm.execute() {
            Ok(v) => rego_dec(&v),
            Err(_) => Dec::Deny,
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// bursar's expression language vs CEL on the same condition.

fn expr_vs_cel(specs: &[JobSpec], rounds: usize) -> Result<Vec<(String, f64)>, String> {
    let cond = "job.stage == 'eval' && job.gpus > 16 || job.requested_hours > 48.0";
    let ours = bursar_lang::expr::compile_condition(cond).map_err(|e| e.message)?;
    let cel = cel_interpreter::Program::compile(cond).map_err(|e| e.to_string())?;
    let engine = Engine::new(Arc::new(PolicySet::empty()));
    let state = engine.state();
    let events: Vec<Event> = specs
        .iter()
        .map(|s| Event {
            id: format!("x-{}", s.id),
            time: bursar_model::Timestamp(0),
            kind: EventKind::JobSubmitted(Box::new(s.clone())),
            extra: Vec::new(),
        })
        .collect();
    let cel_ctx = |s: &JobSpec| {
        let mut job = std::collections::HashMap::new();
        job.insert("stage".to_owned(), cel_interpreter::Value::from(s.stage.clone().unwrap_or_default()));
        job.insert("gpus".to_owned(), cel_interpreter::Value::Int(i64::from(s.gpus)));
        job.insert("requested_hours".to_owned(), cel_interpreter::Value::Float(s.requested_hours));
        let mut c = cel_interpreter::Context::default();
        c.add_variable_from_value("job", job);
        c
    };
    // Agreement first.
    for (s, e) in specs.iter().zip(&events) {
        let env = bursar_lang::expr::Env { event: e, spec: Some(s), job: None, state, now: e.time };
        let a = ours.truthy(&env);
        let b = matches!(cel.execute(&cel_ctx(s)), Ok(cel_interpreter::Value::Bool(true)));
        if a != b {
            return Err(format!("expression disagreement on job {}: bursar {a}, CEL {b}", s.id));
        }
    }
    let prebuilt: Vec<cel_interpreter::Context> = specs.iter().map(cel_ctx).collect();
    let mut best = [f64::MAX; 3];
    for _ in 0..rounds {
        let t = Instant::now();
        for (s, e) in specs.iter().zip(&events) {
            let env = bursar_lang::expr::Env { event: e, spec: Some(s), job: None, state, now: e.time };
            black_box(ours.truthy(black_box(&env)));
        }
        best[0] = best[0].min(t.elapsed().as_nanos() as f64 / specs.len() as f64);
        let t = Instant::now();
        for c in &prebuilt {
            black_box(cel.execute(black_box(c)).ok());
        }
        best[1] = best[1].min(t.elapsed().as_nanos() as f64 / specs.len() as f64);
        let t = Instant::now();
        for s in specs {
            black_box(cel.execute(&cel_ctx(black_box(s))).ok());
        }
        best[2] = best[2].min(t.elapsed().as_nanos() as f64 / specs.len() as f64);
    }
    Ok(vec![
        (format!("bursar expression `{cond}`"), best[0]),
        ("cel-interpreter, context prebuilt".to_owned(), best[1]),
        ("cel-interpreter, context built per call".to_owned(), best[2]),
    ])
}

// ---------------------------------------------------------------------------------------------------

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn per_decision(f: &mut dyn FnMut() -> Duration, n: usize, rounds: usize) -> (f64, f64) {
    let mut v: Vec<f64> = (0..rounds).map(|_| f().as_nanos() as f64 / n as f64).collect();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let requests = arg(&args, "--requests", 20_000) as usize;
    let rounds = arg(&args, "--rounds", 7).max(1) as usize;
    let seed = arg(&args, "--seed", 1);
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
    let read = |f: &str| std::fs::read_to_string(here.join(f)).unwrap_or_default();

    let set = match bursar_loader::load_dir(&here.join("admission.toml"), &bursar_loader::NoComponents) {
        Ok(s) => Arc::new(s),
        Err(ds) => {
            for d in ds {
                eprint!("{d}");
            }
            return ExitCode::FAILURE;
        }
    };
    if !args.iter().any(|a| a == "--no-guest-build")
        && let Err(e) = build_guest(&here)
    {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let host = match bursar_wasm::WasmHost::shared() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let wasm_set = match bursar_loader::load_dir(&here.join("admission-wasm.toml"), host) {
        Ok(s) => Arc::new(s),
        Err(ds) => {
            for d in ds {
                eprint!("{d}");
            }
            return ExitCode::FAILURE;
        }
    };
    let rec = record(&set, stream(requests, seed));
    // The WebAssembly row's stream, and the TOML policy on it too (the same events, apart from the policy).
    let tagged_events = tagged(&rec.events);
    let wasm = record(&wasm_set, tagged_events.clone());
    let toml_tagged = record(&set, tagged_events.clone());
    if wasm.reqs != rec.reqs || toml_tagged.reqs != rec.reqs || wasm.tag_mismatches + toml_tagged.tag_mismatches > 0 {
        eprintln!(
            "the tagged stream changed what bursar saw: requests equal {} / {}, tag ledger mismatches {} / {}",
            wasm.reqs == rec.reqs,
            toml_tagged.reqs == rec.reqs,
            wasm.tag_mismatches,
            toml_tagged.tag_mismatches
        );
        return ExitCode::FAILURE;
    }
    let cedar = match Cedar::new(&read("admission.cedar")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cedar: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut rego = match Rego::new(&read("admission.rego")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("regorus: {e}");
            return ExitCode::FAILURE;
        }
    };
    let n = rec.reqs.len();

    // Agreement: every engine against the floor, on every request.
    let cedar_reqs: Vec<cedar_policy::Request> = match rec.reqs.iter().map(|r| cedar.request(r)).collect() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("cedar request: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rego_inputs: Vec<regorus::Value> = rec.reqs.iter().map(rego_input).collect();
    let mut disagreements = 0usize;
    let mut mix = [0usize; 3];
    for (i, r) in rec.reqs.iter().enumerate() {
        let want = floor(r);
        mix[want as usize] += 1;
        let got = [
            ("bursar", rec.bursar[i]),
            ("bursar-wasm", wasm.bursar[i]),
            ("bursar, tagged stream", toml_tagged.bursar[i]),
            ("cedar", cedar.decide(&cedar_reqs[i])),
            ("regorus-interpreter", rego.interp(rego_inputs[i].clone())),
            ("regorus-rvm", rego.rvm(rego_inputs[i].clone())),
        ];
        for (name, d) in got {
            if d != want {
                disagreements += 1;
                if disagreements <= 10 {
                    eprintln!("disagreement on request {i}: {name} says {d:?}, the plain function {want:?}: {r:?}");
                }
            }
        }
    }
    println!(
        "agreement: {n} requests × 6 runs (bursar TOML on the plain and on the tagged stream, bursar \
         WebAssembly, Cedar, Regorus interpreter, Regorus RVM) checked against the plain function: \
         {disagreements} disagreements \
         (floor decisions: allow {}, deny {}, require_approval {})",
        mix[0], mix[1], mix[2]
    );
    let failures = || wasm_set.policies().iter().map(|p| p.failures()).sum::<u64>();
    if failures() > 0 {
        eprintln!("the WebAssembly policy failed {} times (its on_error decided those requests)", failures());
        return ExitCode::FAILURE;
    }
    if disagreements > 0 {
        return ExitCode::FAILURE;
    }

    // Timing.
    let clock = clock_overhead_ns();
    let bursar_rounds = |set: &Arc<PolicySet>, events: &[Event]| {
        let mut v: Vec<f64> = (0..rounds)
            .map(|_| {
                let (d, k) = time_bursar(set, events, clock);
                d.as_nanos() as f64 / k as f64
            })
            .collect();
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let mut rows: Vec<(&str, (f64, f64))> = Vec::new();
    rows.push((
        "plain Rust function (floor), usage in the request",
        per_decision(
            &mut || {
                let t = Instant::now();
                for r in &rec.reqs {
                    black_box(floor(black_box(r)));
                }
                t.elapsed()
            },
            n,
            rounds,
        ),
    ));
    rows.push(("bursar TOML, engine with its own state lookups", bursar_rounds(&set, &rec.events)));
    rows.push((
        "bursar WebAssembly (Rust guest), engine with its own state lookups, tagged stream",
        bursar_rounds(&wasm_set, &tagged_events),
    ));
    rows.push(("bursar TOML on the tagged stream (the WebAssembly row's events)", bursar_rounds(&set, &tagged_events)));
    rows.push((
        "Cedar, usage in the request (request prebuilt)",
        per_decision(
            &mut || {
                let t = Instant::now();
                for q in &cedar_reqs {
                    black_box(cedar.decide(black_box(q)));
                }
                t.elapsed()
            },
            n,
            rounds,
        ),
    ));
    rows.push((
        "Cedar, request built per call",
        per_decision(
            &mut || {
                let t = Instant::now();
                for r in &rec.reqs {
                    if let Ok(q) = cedar.request(black_box(r)) {
                        black_box(cedar.decide(&q));
                    }
                }
                t.elapsed()
            },
            n,
            rounds,
        ),
    ));
    rows.push((
        "Regorus interpreter, usage in the input (input prebuilt)",
        per_decision(
            &mut || {
                let inputs = rego_inputs.clone();
                let t = Instant::now();
                for v in inputs {
                    black_box(rego.interp(black_box(v)));
                }
                t.elapsed()
            },
            n,
            rounds,
        ),
    ));
    rows.push((
        "Regorus RVM (compiled), usage in the input (input prebuilt)",
        per_decision(
            &mut || {
                let inputs = rego_inputs.clone();
                let t = Instant::now();
                for v in inputs {
                    black_box(rego.rvm(black_box(v)));
                }
                t.elapsed()
            },
            n,
            rounds,
        ),
    ));
    let floor_ns = rows[0].1.1;
    let bursar_ns = rows[1].1.1;
    println!();
    println!("| engine | best ns/decision | median ns/decision | × floor | × bursar |");
    println!("|---|---:|---:|---:|---:|");
    for (name, (best, median)) in &rows {
        println!(
            "| {name} | {best:.0} | {median:.0} | {:.1} | {:.2} |",
            median / floor_ns.max(0.01),
            median / bursar_ns.max(0.01)
        );
    }
    println!();
    println!(
        "{n} requests, {rounds} rounds; clock read cost {clock:.0} ns, subtracted from bursar's per-submission timing"
    );
    if failures() > 0 {
        eprintln!("the WebAssembly policy failed {} times while timed (its on_error decided those)", failures());
        return ExitCode::FAILURE;
    }
    // The same tagged events through the same engine: only the policy differs. Best and median of the
    // rounds, since a shared machine moves medians more than bests.
    let ((wasm_best, wasm_med), (toml_best, toml_med)) = (rows[2].1, rows[3].1);
    println!(
        "WebAssembly policy vs its TOML twin, same tagged events: {:.2}× by median ({wasm_med:.0} vs {toml_med:.0} \
         ns per submission, {:+.0} ns), {:.2}× by best ({wasm_best:.0} vs {toml_best:.0} ns, {:+.0} ns); \
         median vs the TOML row on the plain stream: {:.2}×",
        wasm_med / toml_med.max(0.01),
        wasm_med - toml_med,
        wasm_best / toml_best.max(0.01),
        wasm_best - toml_best,
        wasm_med / bursar_ns.max(0.01)
    );

    let specs: Vec<JobSpec> = rec
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::JobSubmitted(j) => Some((**j).clone()),
            _ => None,
        })
        .collect();
    match expr_vs_cel(&specs, rounds) {
        Ok(rows) => {
            println!();
            println!("| expression engine | best ns/evaluation | × bursar |");
            println!("|---|---:|---:|");
            let base = rows[0].1;
            for (name, ns) in &rows {
                println!("| {name} | {ns:.0} | {:.1} |", ns / base.max(0.01));
            }
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
