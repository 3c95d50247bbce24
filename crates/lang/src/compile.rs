//! From a policy file's text to compiled policies: syntax errors, then each `[[policy]]` table's
//! common fields (id, description, kind, mode, selector), then the family's own fields.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bursar_engine::policy::{QuotaLimit, QuotaScope, Settle};
use bursar_engine::{EventMask, Mode, PolicyMeta, Selector, mark_key};
use bursar_model::{Duration, Period};
use toml::de::{DeTable, DeValue};

use crate::diag::Diagnostic;
use crate::expr::{ExprError, Template, compile_condition};
use crate::families::*;
use crate::reader::{Fields, Reader, type_name};
use crate::{CompiledFile, OnError, WasmDecl, WasmLimits, WasmStrategy};

/// Every `kind`.
pub const KINDS: &[&str] = &[
    "quota",
    "approval",
    "reclaim",
    "asset_reuse",
    "readiness",
    "fit",
    "trial",
    "placement",
    "efficiency",
    "rule",
    "wasm",
];

const COMMON: &[&str] = &["id", "description", "kind", "mode", "select", "self_approval"];

fn known(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = COMMON.to_vec();
    v.extend_from_slice(extra);
    v
}

/// Where an expression written in a TOML string starts in the file, so errors inside it get the right
/// column: exact for plain one-line strings, the string's start otherwise.
fn expr_span(source: &str, value: &Range<usize>, err: &ExprError) -> Range<usize> {
    let raw = source.get(value.clone()).unwrap_or("");
    let simple = (raw.starts_with('"') && !raw.starts_with("\"\"\"") && !raw.contains('\\'))
        || (raw.starts_with('\'') && !raw.starts_with("'''"));
    if simple {
        let base = value.start + 1;
        (base + err.span.start)..(base + err.span.end.max(err.span.start + 1))
    } else {
        value.clone()
    }
}

fn condition(r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str) -> Option<(String, crate::expr::Expr)> {
    let (text, span) = f.str(r, key)?;
    match compile_condition(&text) {
        Ok(e) => Some((text, e)),
        Err(err) => {
            let at = expr_span(r.source, &span, &err);
            r.error_help(
                at,
                format!("in `{key}`: {}", err.message),
                "see docs/policy-language.md#expressions for names and operators",
            );
            None
        }
    }
}

fn template(r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str) -> Option<Template> {
    let (text, span) = f.str(r, key)?;
    match Template::compile(&text) {
        Ok(t) => Some(t),
        Err(err) => {
            let at = expr_span(r.source, &span, &err);
            r.error(at, format!("in `{key}`: {}", err.message));
            None
        }
    }
}

fn selector(r: &mut Reader<'_>, f: &mut Fields<'_, '_>) -> Selector {
    let Some(mut s) = f.table(r, "select") else { return Selector::default() };
    s.what = "`select`".into();
    let list = |r: &mut Reader<'_>, s: &mut Fields<'_, '_>, k: &str| {
        s.str_list(r, k).unwrap_or_default().into_iter().map(|(v, _)| v).collect::<Vec<_>>()
    };
    let mut sel = Selector {
        projects: list(r, &mut s, "projects"),
        users: list(r, &mut s, "users"),
        queues: list(r, &mut s, "queues"),
        stages: list(r, &mut s, "stages"),
        gpu_types: list(r, &mut s, "gpu_types"),
        tags: Vec::new(),
    };
    if let Some(mut tags) = s.table(r, "tags") {
        for (k, _, v) in tags.entries() {
            match v.get_ref() {
                DeValue::String(val) => sel.tags.push((k.to_owned(), val.to_string())),
                other => r.error(v.span(), format!("tag `{k}` must be a string, found {}", type_name(other))),
            }
        }
    }
    s.finish(r, &["projects", "users", "queues", "stages", "gpu_types", "tags"]);
    sel
}

fn action(r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str, options: &[&'static str], default: &str) -> Action {
    let kw = f.keyword(r, key, options).unwrap_or(default);
    let approvers = f.str_list(r, "approvers").unwrap_or_default().into_iter().map(|(v, _)| v).collect();
    let expires = f.duration(r, "approval_expires").unwrap_or(Duration::hours(24));
    match kw {
        "require_approval" => Action::RequireApproval { approvers, expires },
        "alert" => Action::Alert,
        _ => Action::Deny,
    }
}

/// Branch names, with an empty name for each branch the configuration cannot take.
fn branches<'a>(list: &[(&'a str, bool)]) -> Vec<&'a str> {
    list.iter().map(|(name, on)| if *on { *name } else { "" }).collect()
}

fn mask(names: &[&str]) -> EventMask {
    names.iter().filter_map(|n| EventMask::of_name(n)).fold(EventMask::NONE, EventMask::with)
}

fn clock(r: &mut Reader<'_>, s: &str, span: &Range<usize>) -> Option<i64> {
    let bad = |r: &mut Reader<'_>| {
        r.error_help(span.clone(), format!("`{s}` is not a time of day"), "write it as `\"HH:MM\"`, e.g. `\"22:00\"`");
        None
    };
    let Some((h, m)) = s.split_once(':') else { return bad(r) };
    match (h.parse::<i64>(), m.parse::<i64>()) {
        (Ok(h), Ok(m)) if (0..24).contains(&h) && (0..60).contains(&m) => Some((h * 60 + m) * 60_000),
        _ => bad(r),
    }
}

fn offset(r: &mut Reader<'_>, s: &str, span: &Range<usize>) -> Option<Duration> {
    let b = s.as_bytes();
    let ok = b.len() == 6 && matches!(b[0], b'+' | b'-') && b[3] == b':';
    let parsed = if ok { (s[1..3].parse::<i64>().ok(), s[4..6].parse::<i64>().ok()) } else { (None, None) };
    match parsed {
        (Some(h), Some(m)) if h < 24 && m < 60 => {
            let ms = (h * 60 + m) * 60_000;
            Some(Duration(if b[0] == b'-' { -ms } else { ms }))
        }
        _ => {
            r.error_help(
                span.clone(),
                format!("`{s}` is not a UTC offset"),
                "write it as `\"+08:00\"` or `\"-05:00\"`",
            );
            None
        }
    }
}

/// `[policy.cost_per_unit]` of the efficiency family.
fn cost_per_unit(r: &mut Reader<'_>, mut t: Fields<'_, '_>) -> CostPerUnit {
    t.what = "`cost_per_unit`".into();
    let mut per_gpu_hour = Vec::new();
    let mut default_price = None;
    match t.table(r, "per_gpu_hour") {
        Some(mut p) => {
            let entries = p.entries();
            if entries.is_empty() {
                r.error_help(
                    p.span.clone(),
                    "`per_gpu_hour` names no GPU type",
                    "e.g. `per_gpu_hour = { A100 = 12.0, H100 = 30.0, default = 15.0 }`",
                );
            }
            for (k, _, v) in entries {
                let n = match v.get_ref() {
                    DeValue::Integer(i) => i.as_str().replace('_', "").parse::<f64>().ok(),
                    DeValue::Float(x) => x.as_str().replace('_', "").parse::<f64>().ok(),
                    _ => None,
                };
                match n {
                    Some(n) if n.is_finite() && n > 0.0 => {
                        if k == "default" {
                            default_price = Some(n);
                        } else {
                            per_gpu_hour.push((k.to_owned(), n));
                        }
                    }
                    _ => r.error_help(
                        v.span(),
                        format!("the price of a `{k}` GPU-hour must be a number greater than 0"),
                        "write the price of one GPU-hour, e.g. `H100 = 30.0`",
                    ),
                }
            }
        }
        None => r.error_help(
            t.span.clone(),
            "`cost_per_unit` is missing `per_gpu_hour`",
            "give the price of one GPU-hour per GPU type, e.g. `per_gpu_hour = { A100 = 12.0, H100 = 30.0, default = 15.0 }`",
        ),
    }
    let currency = t.str(r, "currency").map(|(c, _)| c);
    let margin = match t.num(r, "margin") {
        Some((m, _)) if m >= 0.0 => m,
        Some((m, span)) => {
            r.error_help(
                span,
                format!("`margin` must be at least 0, found {m}"),
                "it is how much more per unit of work the asked type may cost before it is advice: 0.15 is 15%",
            );
            0.1
        }
        None => 0.1,
    };
    let min_runs = match t.num(r, "min_runs") {
        Some((n, _)) if n >= 1.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX) => n as u32,
        Some((n, span)) => {
            r.error_help(
                span,
                format!("`min_runs` must be a whole number of at least 1, found {n}"),
                "it is how many measured runs a GPU type needs before its cost counts; 2 (the default) keeps one noisy trial from deciding",
            );
            2
        }
        None => 2,
    };
    let scaling_below = t.fraction(r, "scaling_below");
    let require_separated = t.bool(r, "require_separated").unwrap_or(false);
    let action = action(r, &mut t, "action", &["alert", "deny"], "alert");
    t.finish(r, &["per_gpu_hour", "currency", "margin", "min_runs", "scaling_below", "require_separated", "action"]);
    CostPerUnit { per_gpu_hour, default_price, currency, margin, min_runs, scaling_below, require_separated, action }
}

/// Compiles one file.
pub fn compile(file: &str, source: &str, base_dir: &Path) -> Result<CompiledFile, Vec<Diagnostic>> {
    let (doc, syntax) = DeTable::parse_recoverable(source);
    if !syntax.is_empty() {
        return Err(syntax
            .iter()
            .map(|e| match e.span() {
                Some(span) => Diagnostic::at(file, source, span, e.message().trim().to_owned()),
                None => Diagnostic::file(file, e.message().trim().to_owned()),
            })
            .collect());
    }
    let mut r = Reader::new(file, source);
    let root = doc.get_ref();
    if !root.contains_key("policy")
        && !root.contains_key("tag")
        && let Some(d) = misplaced_config(&r, root)
    {
        return Err(vec![d]);
    }
    let mut top = Fields::new(root, 0..0, "the file");
    let mut out = CompiledFile::default();
    let policies = top.tables(&mut r, "policy");
    let tags = top.tables(&mut r, "tag");
    if policies.is_empty() && !top.has("policy") && tags.is_empty() {
        r.errors.push(Diagnostic::file(file, "no `[[policy]]` table in this file").with_help(
            "a policy file holds one or more `[[policy]]` tables (or `[[tag]]` tables); see docs/policy-language.md",
        ));
    }
    let mut seen: Vec<(String, Range<usize>)> = Vec::new();
    for p in policies {
        compile_policy(&mut r, p, base_dir, &mut seen, &mut out);
    }
    for t in tags {
        if let Some(t) = tag_source(&mut r, t) {
            out.tags.push(t);
        }
    }
    top.finish(&mut r, &["policy", "tag"]);
    if r.errors.is_empty() { Ok(out) } else { Err(r.errors) }
}

/// A file with no policy that is one of serve's configuration files, left in the policy directory
/// (where every `.toml` is read as policies): says which it is and where it belongs, at the key that
/// gave it away.
fn misplaced_config(r: &Reader<'_>, root: &DeTable<'_>) -> Option<Diagnostic> {
    const KINDS: [(&[&str], &str, &str); 3] = [
        (
            &["serve", "principal", "auth", "tls", "witness", "cluster", "clock", "notify", "utilisation"],
            "this is bursar's site configuration (`bursar serve --config`), not a policy file",
            "every `.toml` file in the policy directory is read as policies: keep the configuration outside it (e.g. /etc/bursar/bursar.toml) and give it to `--config`; docs/operations.md",
        ),
        (
            &["public_url", "alertmanager", "webhook", "key_file", "resend", "info_for"],
            "this is a notifications file (`bursar serve --notify`), not a policy file",
            "every `.toml` file in the policy directory is read as policies: put these settings under `[notify]` in bursar.toml (`--config`), or keep the file outside the policy directory and give it to `--notify`; docs/notifications.md",
        ),
        (
            &["prometheus", "jobs"],
            "this is a utilisation file (`bursar serve --utilisation`), not a policy file",
            "every `.toml` file in the policy directory is read as policies: put these settings under `[utilisation]` in bursar.toml (`--config`), or keep the file outside the policy directory and give it to `--utilisation`; docs/integrations/utilisation.md",
        ),
    ];
    for (keys, message, help) in KINDS {
        let first =
            root.iter().filter(|(k, _)| keys.contains(&k.get_ref().as_ref())).min_by_key(|(k, _)| k.span().start);
        if let Some((k, _)) = first {
            return Some(r.diagnostic(k.span(), message).with_help(help));
        }
    }
    None
}

/// A `[[tag]]` table: where a tag's value comes from.
fn tag_source(r: &mut Reader<'_>, mut f: Fields<'_, '_>) -> Option<bursar_engine::TagSource> {
    use bursar_engine::TagFrom;
    let key = f.req_str(r, "key", "the tag's key, e.g. `key = \"team\"`");
    if let Some((k, _)) = &key {
        f.what = format!("tag `{k}`");
    }
    let from = if f.has("from") {
        f.keyword(r, "from", &["project", "queue", "user", "submitter"])
    } else {
        r.error_help(
            f.span.clone(),
            format!("{} is missing `from`", f.what),
            "`from = \"project\"` looks the value up by the job's project (`queue`, `user` likewise); `from = \"submitter\"` keeps what the submission says",
        );
        None
    };
    let mut map = std::collections::BTreeMap::new();
    if let Some(mut m) = f.table(r, "map") {
        for (k, _, v) in m.entries() {
            match v.get_ref() {
                DeValue::String(val) => {
                    map.insert(k.to_owned(), val.to_string());
                }
                other => r.error(v.span(), format!("the value for `{k}` must be a string, found {}", type_name(other))),
            }
        }
    }
    let default = f.str(r, "default").map(|(d, _)| d);
    let location = {
        let d = r.diagnostic(f.span.clone(), "");
        format!("{}:{}:{}", d.file, d.line, d.column)
    };
    let from = match from? {
        "project" => TagFrom::Project,
        "queue" => TagFrom::Queue,
        "user" => TagFrom::User,
        _ => TagFrom::Submitter,
    };
    if from == TagFrom::Submitter && (!map.is_empty() || default.is_some()) {
        r.error(f.span.clone(), format!("{}: `map` and `default` mean nothing with `from = \"submitter\"`", f.what));
    }
    if from != TagFrom::Submitter && map.is_empty() && default.is_none() {
        r.error_help(
            f.span.clone(),
            format!("{} gives no value: it needs `map` (and may have `default`)", f.what),
            "e.g. `map = { nlp = \"search\", speech = \"search\" }`",
        );
    }
    f.finish(r, &["key", "from", "map", "default"]);
    Some(bursar_engine::TagSource { key: key?.0, from, map, default, source: location })
}

fn compile_policy(
    r: &mut Reader<'_>,
    mut f: Fields<'_, '_>,
    base_dir: &Path,
    seen: &mut Vec<(String, Range<usize>)>,
    out: &mut CompiledFile,
) {
    let id = f.req_str(r, "id", "every policy needs a unique `id`, e.g. `id = \"quota/monthly-gpu-hours\"`");
    let id_span = id.as_ref().map(|(_, s)| s.clone()).unwrap_or(f.span.clone());
    if let Some((id, span)) = &id {
        if id.trim().is_empty() || id.chars().any(char::is_whitespace) {
            r.error_help(
                span.clone(),
                format!("policy id `{id}` is empty or has spaces"),
                "use letters, digits, `-`, `_` and `/`",
            );
        }
        if let Some((_, first)) = seen.iter().find(|(s, _)| s == id) {
            let first_line = r.diagnostic(first.clone(), "").line;
            r.error(span.clone(), format!("policy id `{id}` is already used on line {first_line} of this file"));
        }
        seen.push((id.clone(), span.clone()));
        f.what = format!("policy `{id}`");
    }
    let description = f
        .req_str(r, "description", "say in a sentence what the policy is for; it is shown in listings and reports")
        .map(|(d, _)| d)
        .unwrap_or_default();
    let kind = if f.has("kind") {
        f.keyword(r, "kind", KINDS)
    } else {
        r.error_help(
            f.span.clone(),
            format!("{} is missing `kind`", f.what),
            format!("`kind` is one of {}", crate::reader::one_of(KINDS)),
        );
        None
    };
    let mode = match f.keyword(r, "mode", &["enforce", "dry_run"]) {
        Some("dry_run") => Mode::DryRun,
        _ => Mode::Enforce,
    };
    let selector = selector(r, &mut f);
    let self_approval = f.bool(r, "self_approval").unwrap_or(false);
    let Some(kind) = kind else {
        // Without a kind the other fields cannot be checked; do not report them as unknown.
        let _ = f.entries();
        return;
    };
    let id_text = id.as_ref().map(|(s, _)| s.clone()).unwrap_or_default();
    let location = {
        let d = r.diagnostic(id_span, "");
        format!("{}:{}:{}", d.file, d.line, d.column)
    };
    let meta = |events: EventMask, kind: &'static str, branches: &[&str]| PolicyMeta {
        id: Arc::from(id_text.as_str()),
        description: description.clone(),
        mode,
        selector: selector.clone(),
        events,
        source: location.clone(),
        kind,
        branches: branches.iter().map(|b| (*b).to_owned()).collect(),
        self_approval,
    };
    let submitted = mask(&["job.submitted"]);
    let before = r.errors.len();
    let family = match kind {
        "quota" => {
            let scope = match f.str(r, "scope") {
                None => QuotaScope::Project,
                Some((s, span)) => match s.as_str() {
                    "project" => QuotaScope::Project,
                    "user" => QuotaScope::User,
                    t if t.starts_with("tag:") && t.len() > 4 => QuotaScope::Tag(t[4..].to_owned()),
                    _ => {
                        r.error_help(
                            span,
                            format!("`scope` must be `project`, `user` or `tag:KEY`, found `{s}`"),
                            "for a tag write e.g. `scope = \"tag:team\"`",
                        );
                        QuotaScope::Project
                    }
                },
            };
            let period = match f.keyword(r, "period", &["day", "week", "month"]) {
                Some("day") => Period::Day,
                Some("week") => Period::Week,
                _ => Period::Month,
            };
            let gpu_hours = f.positive(r, "gpu_hours");
            let mut overrides = Vec::new();
            if let Some(mut t) = f.table(r, "limits") {
                for (k, _, v) in t.entries() {
                    let n = match v.get_ref() {
                        DeValue::Integer(i) => i.as_str().replace('_', "").parse::<f64>().ok(),
                        DeValue::Float(x) => x.as_str().replace('_', "").parse::<f64>().ok(),
                        _ => None,
                    };
                    match n {
                        Some(n) if n > 0.0 => overrides.push((k.to_owned(), n)),
                        _ => r.error(v.span(), format!("limit for `{k}` must be a number of GPU-hours greater than 0")),
                    }
                }
            }
            let max_gpus = f.gpus(r, "max_gpus");
            let mut queues = Vec::new();
            if let Some(mut t) = f.table(r, "queues") {
                for (k, _, v) in t.entries() {
                    if let Some(n) =
                        crate::reader::gpus_value(r, v.get_ref(), v.span(), &format!("cap for queue `{k}`"))
                    {
                        queues.push((k.to_owned(), n));
                    }
                }
            }
            let settle = match f.keyword(r, "settle", &["runtime", "billing"]) {
                Some("billing") => Settle::Billing,
                _ => Settle::Runtime,
            };
            let on_exhaust = action(r, &mut f, "on_exhaust", &["deny", "require_approval"], "deny");
            if gpu_hours.is_none()
                && overrides.is_empty()
                && max_gpus.is_none()
                && queues.is_empty()
                && r.errors.len() == before
            {
                r.error_help(
                    f.span.clone(),
                    format!("{} limits nothing", f.what),
                    "set `gpu_hours`, `limits`, `max_gpus` or `queues`",
                );
            }
            f.finish(
                r,
                &known(&[
                    "scope",
                    "period",
                    "gpu_hours",
                    "limits",
                    "max_gpus",
                    "queues",
                    "settle",
                    "on_exhaust",
                    "approvers",
                    "approval_expires",
                ]),
            );
            (
                meta(
                    submitted,
                    "quota",
                    &branches(&[
                        ("gpu_hours exceeded", gpu_hours.is_some() || !overrides.is_empty()),
                        ("max_gpus exceeded", max_gpus.is_some()),
                        ("queue cap exceeded", !queues.is_empty()),
                        ("within quota", true),
                    ]),
                ),
                Family::Quota(Quota {
                    limit: QuotaLimit { scope, period, gpu_hours, limits: overrides, max_gpus, queues, settle },
                    on_exhaust,
                }),
            )
        }
        "approval" => {
            let gpus_over = f.count(r, "gpus_over");
            let hours_over = f.positive(r, "hours_over");
            let gpu_hours_over = f.positive(r, "gpu_hours_over");
            let gpu_types =
                f.str_list(r, "gpu_types").unwrap_or_default().into_iter().map(|(v, _)| v).collect::<Vec<_>>();
            let when = condition(r, &mut f, "when");
            let approvers = f.str_list(r, "approvers").unwrap_or_default().into_iter().map(|(v, _)| v).collect();
            let expires = f.duration(r, "expires").unwrap_or(Duration::hours(24));
            if gpus_over.is_none()
                && hours_over.is_none()
                && gpu_hours_over.is_none()
                && gpu_types.is_empty()
                && when.is_none()
                && r.errors.len() == before
            {
                r.error_help(
                    f.span.clone(),
                    format!("{} has no condition", f.what),
                    "set `gpus_over`, `hours_over`, `gpu_hours_over`, `gpu_types` or `when`",
                );
            }
            f.finish(
                r,
                &known(&["gpus_over", "hours_over", "gpu_hours_over", "gpu_types", "when", "approvers", "expires"]),
            );
            (
                meta(
                    submitted,
                    "approval",
                    &branches(&[
                        ("gpus_over", gpus_over.is_some()),
                        ("hours_over", hours_over.is_some()),
                        ("gpu_hours_over", gpu_hours_over.is_some()),
                        ("gpu_types", !gpu_types.is_empty()),
                        ("when", when.is_some()),
                        ("no approval needed", true),
                    ]),
                ),
                Family::Approval(Approval {
                    gpus_over,
                    hours_over,
                    gpu_hours_over,
                    gpu_types,
                    when,
                    approvers,
                    expires,
                }),
            )
        }
        "reclaim" => {
            let on_finish = f.bool(r, "on_finish").unwrap_or(false);
            let on_rerun = f.bool(r, "on_rerun").unwrap_or(false);
            let max_runtime = f.duration(r, "max_runtime");
            let idle = f.table(r, "idle").map(|mut t| {
                t.what = "`idle`".into();
                let below = t.fraction(r, "below");
                let window = t.duration(r, "window");
                let grace = t.duration(r, "grace").unwrap_or(Duration::hours(1));
                if !t.has("below") && below.is_none() {
                    r.error(
                        t.span.clone(),
                        "`idle` is missing `below` (utilisation under which a job is idle, e.g. 0.05)",
                    );
                }
                if !t.has("window") && window.is_none() {
                    r.error(t.span.clone(), "`idle` is missing `window` (how long it must stay under, e.g. \"2h\")");
                }
                let min_samples = match t.num(r, "min_samples") {
                    Some((n, span)) if n < 1.0 || n.fract() != 0.0 || n > f64::from(u32::MAX) => {
                        r.error_help(
                            span,
                            format!("`min_samples` must be a whole number of at least 1, found {n}"),
                            "it is how many samples under `below` the window must hold before it alerts; 1 (the default) is the first",
                        );
                        None
                    }
                    Some((n, _)) => Some(n as u32),
                    None => None,
                };
                t.finish(r, &["below", "window", "grace", "min_samples"]);
                Idle {
                    below: below.unwrap_or(0.05),
                    window: window.unwrap_or(Duration::hours(2)),
                    grace,
                    min_samples: min_samples.unwrap_or(1),
                }
            });
            if !on_finish && !on_rerun && max_runtime.is_none() && idle.is_none() && r.errors.len() == before {
                r.error_help(
                    f.span.clone(),
                    format!("{} reclaims nothing", f.what),
                    "set `on_finish = true`, `on_rerun = true`, `max_runtime` or an `[policy.idle]` table",
                );
            }
            let mut names = Vec::new();
            if on_finish {
                names.push("job.finished");
            }
            if max_runtime.is_some() || on_rerun {
                names.push("job.started");
            }
            if on_rerun {
                names.push("job.requeued");
            }
            if idle.is_some() {
                names.extend(["job.sample", "job.keepalive"]);
            }
            f.finish(r, &known(&["on_finish", "on_rerun", "max_runtime", "idle"]));
            let keys = (mark_key(&id_text, 0), mark_key(&id_text, 1), mark_key(&id_text, 2));
            (
                meta(
                    mask(&names),
                    "reclaim",
                    &branches(&[
                        ("finished", on_finish),
                        ("max_runtime", max_runtime.is_some()),
                        ("idle alert", idle.is_some()),
                        ("idle reclaim", idle.is_some()),
                        ("keepalive", idle.is_some()),
                        ("rerun", on_rerun),
                    ]),
                ),
                Family::Reclaim(Reclaim { on_finish, on_rerun, max_runtime, idle, keys }),
            )
        }
        "asset_reuse" => {
            let list = |r: &mut Reader<'_>, f: &mut Fields<'_, '_>, k: &str, d: &str| {
                f.str_list(r, k).map(|v| v.into_iter().map(|(s, _)| s).collect()).unwrap_or_else(|| vec![d.to_owned()])
            };
            let dataset_stages = list(r, &mut f, "dataset_stages", "data_prep");
            let image_stages = list(r, &mut f, "image_stages", "image_build");
            let action = action(r, &mut f, "action", &["deny", "alert"], "deny");
            f.finish(r, &known(&["dataset_stages", "image_stages", "action"]));
            (
                meta(
                    submitted,
                    "asset_reuse",
                    &branches(&[
                        ("dataset exists", !dataset_stages.is_empty()),
                        ("image exists", !image_stages.is_empty()),
                        ("nothing to reuse", true),
                    ]),
                ),
                Family::AssetReuse(AssetReuse { dataset_stages, image_stages, action }),
            )
        }
        "readiness" => {
            let require: Vec<String> = match f.str_list(r, "require") {
                Some(items) => items
                    .into_iter()
                    .filter_map(|(s, span)| {
                        if ["image", "data", "script"].contains(&s.as_str()) {
                            Some(s)
                        } else {
                            r.error(span, format!("`require` lists `image`, `data` and `script`, found `{s}`"));
                            None
                        }
                    })
                    .collect(),
                None => vec!["image".into(), "data".into(), "script".into()],
            };
            let action = action(r, &mut f, "action", &["deny", "alert"], "deny");
            f.finish(r, &known(&["require", "action"]));
            (
                meta(
                    submitted,
                    "readiness",
                    &branches(&[
                        ("image not ready", require.iter().any(|r| r == "image")),
                        ("data not ready", require.iter().any(|r| r == "data")),
                        ("script not ready", require.iter().any(|r| r == "script")),
                        ("ready", true),
                    ]),
                ),
                Family::Readiness(Readiness { require, action }),
            )
        }
        "fit" => {
            let memory = f.table(r, "memory").map(|mut t| {
                t.what = "`memory`".into();
                let bytes = t.positive(r, "bytes_per_param").unwrap_or(2.0);
                let overhead = t.positive(r, "overhead").unwrap_or(1.2);
                let sharded = t.bool(r, "sharded").unwrap_or(true);
                t.finish(r, &["bytes_per_param", "overhead", "sharded"]);
                (bytes, overhead, sharded)
            });
            let multi_node = f.table(r, "interconnect").map(|mut t| {
                t.what = "`interconnect`".into();
                let v = t.str_list(r, "multi_node").unwrap_or_default().into_iter().map(|(s, _)| s).collect();
                t.finish(r, &["multi_node"]);
                v
            });
            let mut tiers = Vec::new();
            if let Some(mut t) = f.table(r, "tiers") {
                for (stage, _, v) in t.entries() {
                    match v.get_ref() {
                        DeValue::Array(items) => {
                            let mut types = Vec::new();
                            for it in items.iter() {
                                match it.get_ref() {
                                    DeValue::String(s) => types.push(s.to_string()),
                                    other => r.error(
                                        it.span(),
                                        format!(
                                            "tier `{stage}` must list GPU types as strings, found {}",
                                            type_name(other)
                                        ),
                                    ),
                                }
                            }
                            tiers.push((stage.to_owned(), types));
                        }
                        other => r.error(
                            v.span(),
                            format!("tier `{stage}` must be a list of GPU types, found {}", type_name(other)),
                        ),
                    }
                }
            }
            let action = action(r, &mut f, "action", &["deny", "alert"], "deny");
            if memory.is_none() && multi_node.is_none() && tiers.is_empty() && r.errors.len() == before {
                r.error_help(
                    f.span.clone(),
                    format!("{} checks nothing", f.what),
                    "add `[policy.memory]`, `[policy.interconnect]` or `[policy.tiers]`",
                );
            }
            f.finish(r, &known(&["memory", "interconnect", "tiers", "action"]));
            (
                meta(
                    submitted,
                    "fit",
                    &branches(&[
                        ("memory", memory.is_some()),
                        ("interconnect", multi_node.is_some()),
                        ("tier", !tiers.is_empty()),
                        ("fits", true),
                    ]),
                ),
                Family::Fit(Fit { memory, multi_node, tiers, action }),
            )
        }
        "trial" => {
            let above_gpus = f.count(r, "above_gpus");
            if above_gpus.is_none() && !f.has("above_gpus") {
                r.error(
                    f.span.clone(),
                    format!("{} is missing `above_gpus` (jobs with more GPUs need a trial)", f.what),
                );
            }
            let above = above_gpus.unwrap_or(8);
            let trial_max_gpus = f.count(r, "trial_max_gpus").unwrap_or(above);
            let within = f.duration(r, "within").unwrap_or(Duration::hours(24 * 14));
            let action = action(r, &mut f, "action", &["deny", "require_approval"], "deny");
            f.finish(r, &known(&["above_gpus", "trial_max_gpus", "within", "action", "approvers", "approval_expires"]));
            (
                meta(submitted, "trial", &["no trial", "trial too old", "trial ok or small job"]),
                Family::Trial(Trial { above_gpus: above, trial_max_gpus, within, action }),
            )
        }
        "placement" => {
            let mut lanes = Vec::new();
            for mut t in f.tables(r, "lanes") {
                let max_hours = t.positive(r, "max_hours");
                if max_hours.is_none() && !t.has("max_hours") {
                    r.error(t.span.clone(), "a lane needs `max_hours`");
                }
                let queue = t.str(r, "queue").map(|(s, _)| s);
                let priority = t.num(r, "priority").map(|(n, _)| n as i64);
                t.finish(r, &["max_hours", "queue", "priority"]);
                lanes.push(Lane {
                    max_hours: max_hours.unwrap_or(f64::INFINITY),
                    queue: queue.map(Arc::from),
                    priority,
                });
            }
            let off_peak = f.table(r, "off_peak").and_then(|mut t| {
                t.what = "`off_peak`".into();
                let start = t.str(r, "start");
                let end = t.str(r, "end");
                let off = t.str(r, "utc_offset");
                let stages = t.str_list(r, "stages").unwrap_or_default().into_iter().map(|(s, _)| s).collect();
                let span = t.span.clone();
                t.finish(r, &["start", "end", "utc_offset", "stages"]);
                let (Some((s, ss)), Some((e, es))) = (start, end) else {
                    r.error(span, "`off_peak` needs `start` and `end`, e.g. `start = \"22:00\"`, `end = \"06:00\"`");
                    return None;
                };
                let offset = match &off {
                    Some((o, os)) => offset(r, o, os)?,
                    None => Duration(0),
                };
                let label = format!("{s}-{e} {}", off.as_ref().map_or("UTC", |(o, _)| o.as_str()));
                Some(OffPeak { start: clock(r, &s, &ss)?, end: clock(r, &e, &es)?, offset, label, stages })
            });
            let region = f.str(r, "region").map(|(s, _)| s);
            let cross_region = f.table(r, "cross_region").map(|mut t| {
                t.what = "`cross_region`".into();
                let regions =
                    t.str_list(r, "regions").unwrap_or_default().into_iter().map(|(s, _)| Arc::from(s)).collect();
                let copy =
                    t.positive(r, "copy_hours").map_or(Duration(0), |h| Duration((h * 3_600_000.0).round() as i64));
                t.finish(r, &["regions", "copy_hours"]);
                CrossRegion { regions, copy }
            });
            f.finish(r, &known(&["lanes", "off_peak", "region", "cross_region"]));
            (
                meta(
                    submitted,
                    "placement",
                    &branches(&[
                        ("lane", !lanes.is_empty()),
                        ("off-peak deferral", off_peak.is_some()),
                        ("region", region.is_some()),
                        ("no hint", true),
                        ("cross-region", cross_region.is_some()),
                    ]),
                ),
                Family::Placement(Placement { lanes, off_peak, region: region.map(Arc::from), cross_region }),
            )
        }
        "efficiency" => {
            let mixed_precision = f.bool(r, "mixed_precision").unwrap_or(false);
            let min_batch_size = f.count(r, "min_batch_size");
            let dataloader_workers = f.bool(r, "dataloader_workers").unwrap_or(false);
            let cost_per_unit = f.table(r, "cost_per_unit").map(|t| cost_per_unit(r, t));
            f.finish(r, &known(&["mixed_precision", "min_batch_size", "dataloader_workers", "cost_per_unit"]));
            let scaling = cost_per_unit.as_ref().is_some_and(|c| c.scaling_below.is_some());
            (
                meta(
                    submitted,
                    "efficiency",
                    &branches(&[
                        ("mixed precision off", mixed_precision),
                        ("tiny batch", min_batch_size.is_some()),
                        ("inline data loading", dataloader_workers),
                        ("cheaper GPU type", cost_per_unit.is_some()),
                        ("poor scaling", scaling),
                    ]),
                ),
                Family::Efficiency(Efficiency { mixed_precision, min_batch_size, dataloader_workers, cost_per_unit }),
            )
        }
        "rule" => {
            let on = match f.str_list(r, "on") {
                Some(list) => {
                    let mut m = EventMask::NONE;
                    for (name, span) in list {
                        match EventMask::of_name(&name) {
                            Some(x) => m = m.with(x),
                            None => {
                                let mut d = r.diagnostic(span, format!("`{name}` is not an event type"));
                                if let Some(s) = crate::reader::did_you_mean(&name, &bursar_model::EVENT_TYPES) {
                                    d = d.with_help(format!("did you mean `{s}`?"));
                                }
                                r.errors.push(d);
                            }
                        }
                    }
                    m
                }
                None => submitted,
            };
            let when = condition(r, &mut f, "when");
            if when.is_none() && !f.has("when") {
                r.error_help(
                    f.span.clone(),
                    format!("{} is missing `when`", f.what),
                    "e.g. `when = \"job.gpus > 32 && job.stage == 'eval'\"`",
                );
            }
            let decision_kw =
                f.keyword(r, "decision", &["allow", "deny", "require_approval", "defer", "reclaim", "alert"]);
            if decision_kw.is_none() && !f.has("decision") {
                r.error(f.span.clone(), format!("{} is missing `decision`", f.what));
            }
            let reason = template(r, &mut f, "reason");
            if reason.is_none() && !f.has("reason") {
                r.error_help(
                    f.span.clone(),
                    format!("{} is missing `reason`", f.what),
                    "say in a sentence why, e.g. `reason = \"eval jobs may use at most 32 GPUs (asked {job.gpus})\"`",
                );
            }
            let approvers = f.str_list(r, "approvers").unwrap_or_default().into_iter().map(|(v, _)| v).collect();
            let expires = f.duration(r, "expires").unwrap_or(Duration::hours(24));
            let defer_for = f.duration(r, "defer_for");
            let decision = match decision_kw {
                Some("allow") => RuleDecision::Allow,
                Some("require_approval") => RuleDecision::RequireApproval { approvers, expires },
                Some("defer") => {
                    if defer_for.is_none() {
                        r.error(
                            f.span.clone(),
                            format!("{} decides `defer` but has no `defer_for` (e.g. \"2h\")", f.what),
                        );
                    }
                    RuleDecision::Defer(defer_for.unwrap_or(Duration::hours(1)))
                }
                Some("reclaim") => RuleDecision::Reclaim,
                Some("alert") => RuleDecision::Alert,
                _ => RuleDecision::Deny,
            };
            // How often it may fire for one job: every time (default), once, or once per window.
            let once_span = f.get("once").map(|v| v.span());
            let once_kw = f.keyword(r, "once", &["job"]);
            let cooldown = f.duration(r, "cooldown");
            let once = match (once_kw, cooldown) {
                (Some(_), Some(_)) => {
                    r.error_help(
                        once_span.unwrap_or_else(|| f.span.clone()),
                        format!("{} sets both `once` and `cooldown`", f.what),
                        "`once = \"job\"` fires once per job; `cooldown = \"1h\"` at most once per job per hour: keep one",
                    );
                    None
                }
                (Some(_), None) => Some(crate::families::Once::Job),
                (None, Some(d)) => Some(crate::families::Once::Window(d)),
                (None, None) => None,
            };
            f.finish(
                r,
                &known(&["on", "when", "decision", "reason", "approvers", "expires", "defer_for", "once", "cooldown"]),
            );
            let (Some((_, when)), Some(reason)) = (when, reason) else { return };
            (
                meta(on, "rule", &["condition holds", "condition does not hold"]),
                Family::Rule(Rule { when, decision, reason, once, once_key: mark_key(&id_text, 0) }),
            )
        }
        "wasm" => {
            let component = f.req_str(r, "component", "the path of the `.wasm` component, relative to this file");
            let events = match f.str_list(r, "events") {
                Some(list) => {
                    let mut m = EventMask::NONE;
                    for (name, span) in list {
                        match EventMask::of_name(&name) {
                            Some(_) if matches!(name.as_str(), "job.queued" | "job.requeued") => r.error_help(
                                span,
                                format!("`{name}` is not delivered to WebAssembly policies"),
                                "the WIT interface (wit/policy.wit) has a case for each v1 event type only; a TOML `rule` with `on = [\"job.requeued\"]` sees it",
                            ),
                            Some(x) => m = m.with(x),
                            None => r.error(span, format!("`{name}` is not an event type")),
                        }
                    }
                    m
                }
                None => submitted,
            };
            let on_error = match f.keyword(r, "on_error", &["deny", "allow", "skip"]) {
                Some("allow") => OnError::Allow,
                Some("skip") => OnError::Skip,
                _ => OnError::Deny,
            };
            let limits = f
                .table(r, "limits")
                .map(|mut t| {
                    t.what = "`limits`".into();
                    let l = WasmLimits {
                        deadline_ms: t.positive(r, "deadline_ms").map(|v| v as u64),
                        fuel: t.positive(r, "fuel").map(|v| v as u64),
                        memory_mb: t.positive(r, "memory_mb").map(|v| v as u64),
                        max_failures: t.count(r, "max_failures"),
                        strategy: match t.keyword(r, "strategy", &["reuse", "fresh"]) {
                            Some("reuse") => Some(WasmStrategy::Reuse),
                            Some("fresh") => Some(WasmStrategy::Fresh),
                            _ => None,
                        },
                    };
                    t.finish(r, &["deadline_ms", "fuel", "memory_mb", "max_failures", "strategy"]);
                    l
                })
                .unwrap_or_default();
            let config_json =
                f.get("config").map(|v| de_to_json(v.get_ref()).to_string()).unwrap_or_else(|| "{}".into());
            f.finish(r, &known(&["component", "events", "on_error", "limits", "config"]));
            let Some((path, span)) = component else { return };
            if r.errors.len() != before {
                return;
            }
            out.wasm.push(WasmDecl {
                meta: meta(events, "wasm", &["verdict"]),
                component: base_dir.join(&path),
                component_at: r.diagnostic(span, format!("cannot load WebAssembly component `{path}`")),
                on_error,
                limits,
                config_json,
            });
            return;
        }
        _ => return,
    };
    if r.errors.len() == before {
        out.policies.push(Arc::new(TomlPolicy { meta: family.0, family: family.1 }));
    }
}

/// A spanned TOML value as JSON (for a WebAssembly policy's `config`).
pub fn de_to_json(v: &DeValue<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        DeValue::String(s) => J::String(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).map_or(J::Null, J::from),
        DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().map_or(J::Null, J::from),
        DeValue::Boolean(b) => J::Bool(*b),
        DeValue::Datetime(d) => J::String(d.to_string()),
        DeValue::Array(a) => J::Array(a.iter().map(|x| de_to_json(x.get_ref())).collect()),
        DeValue::Table(t) => {
            J::Object(t.iter().map(|(k, v)| (k.get_ref().to_string(), de_to_json(v.get_ref()))).collect())
        }
    }
}
