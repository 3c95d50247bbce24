//! `bursar doctor [--config FILE]`: is this installation ready for the first `sbatch` that depends on
//! it? One line per check, `ok`, `warn` or `FAIL`, with a hint on anything not ok; exit 0 when
//! nothing failed, 1 otherwise (warnings do not fail), so a deployment script can run it.
//!
//! The checks, in the order serve depends on them: the configuration reads; the policies compile;
//! the audit log opens and verifies (with its witness and public key when `[witness]` is set); the
//! signing key, the witness, the audit log and the link key have safe permissions; Prometheus
//! answers the configured query (`[utilisation]`); Alertmanager or the webhook accepts a test notice
//! (`[notify]`; an Alertmanager alert that resolves itself within a minute); the NATS cluster
//! answers and has a JetStream quorum (`[cluster]`).

use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use crate::{CliError, ErrorFormat, ExitCode};

/// `bursar doctor`.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// The configuration file, as serve reads it.
    #[arg(long, value_name = "FILE", default_value = "/etc/bursar/bursar.toml")]
    pub config: PathBuf,
    /// Do not send the test notice (Alertmanager or the webhook are only reached, not written to).
    #[arg(long)]
    pub no_notice: bool,
}

/// One check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Warn,
    Fail,
}

struct Report {
    failed: usize,
}

impl Report {
    fn line(&mut self, level: Level, what: &str, detail: &str, hint: Option<&str>) {
        let tag = match level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        if level == Level::Fail {
            self.failed += 1;
        }
        println!("{tag}  {what}: {detail}");
        if let (Some(h), false) = (hint, level == Level::Ok) {
            println!("      hint: {h}");
        }
    }
}

fn mode(p: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).ok().map(|m| m.permissions().mode() & 0o777)
}

/// Runs the checks.
pub fn run(args: &DoctorArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let mut r = Report { failed: 0 };
    let file = args.config.display().to_string();
    let site = match bursar_config::load(&args.config) {
        Ok(s) => {
            r.line(
                Level::Ok,
                "configuration",
                &format!("{file} reads ({} principal(s))", s.auth.principals.len()),
                None,
            );
            s
        }
        Err(ds) => {
            crate::print_diagnostics(&ds, error_format);
            r.line(
                Level::Fail,
                "configuration",
                &format!("{file}: {} error(s)", ds.len()),
                Some("fix them, then `bursar config check`"),
            );
            return Ok(ExitCode::Failed);
        }
    };
    if let Err(e) = bursar_auth::Authenticator::new(&site.auth) {
        r.line(
            Level::Fail,
            "credentials",
            &e.to_string(),
            Some("the JWT key files must be readable by the user serve runs as"),
        );
    }
    let sargs = {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Just {
            #[command(flatten)]
            serve: crate::serve::ServeArgs,
        }
        let mut a = Just::parse_from(["bursar"]).serve;
        a.config = Some(args.config.clone());
        a
    };
    let resolved = match crate::serve::settings(&sargs, Some(&site), error_format) {
        Ok(x) => x,
        Err(e) => {
            r.line(
                Level::Fail,
                "settings",
                &e.to_string(),
                Some("`bursar config show` prints what serve would run with"),
            );
            return Ok(ExitCode::Failed);
        }
    };
    let c = &resolved.config;

    // Policies.
    match crate::load_policies_with(&c.policies, error_format, resolved.allow_empty) {
        Ok(set) => r.line(
            Level::Ok,
            "policies",
            &format!(
                "{} compile: {} policies, set {}",
                c.policies.display(),
                set.len(),
                &set.digest()[..12.min(set.digest().len())]
            ),
            None,
        ),
        Err(e) => {
            r.line(Level::Fail, "policies", &e.to_string(), Some("`bursar check` on the directory shows every error"))
        }
    }

    // The audit log.
    if c.audit.exists() {
        match bursar_audit::AuditLog::open_read(&c.audit) {
            Ok(log) => {
                let verified = match &c.witness {
                    Some((key, witness)) => bursar_audit::witness::read(witness).and_then(|lines| {
                        let public = bursar_audit::SigningKey::from_file(key).map(|k| k.public()).ok();
                        bursar_audit::verify::verify_with_witness(&log, &lines, public.as_ref())
                    }),
                    None => bursar_audit::verify::verify(&log),
                };
                match verified {
                    Ok(rep) if rep.is_ok() => r.line(
                        Level::Ok,
                        "audit log",
                        &format!("{} opens and verifies (head {})", c.audit.display(), log.head().0),
                        None,
                    ),
                    Ok(rep) => r.line(
                        Level::Fail,
                        "audit log",
                        &format!(
                            "{} does not verify: {}",
                            c.audit.display(),
                            rep.problems.first().map(|p| p.message.clone()).unwrap_or_default()
                        ),
                        Some("`bursar audit verify --db …` says which rows; docs/audit.md"),
                    ),
                    Err(e) => r.line(Level::Fail, "audit log", &e.to_string(), Some("docs/audit.md")),
                }
            }
            Err(e) => r.line(
                Level::Fail,
                "audit log",
                &e.to_string(),
                Some("the user serve runs as must be able to read and write it"),
            ),
        }
    } else {
        let dir = c.audit.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if dir.is_dir() {
            r.line(
                Level::Ok,
                "audit log",
                &format!("{} does not exist yet; serve creates it (mode 0640)", c.audit.display()),
                None,
            );
        } else {
            r.line(
                Level::Fail,
                "audit log",
                &format!("its folder {} does not exist", dir.display()),
                Some("create it, owned by the user serve runs as (the package's StateDirectory does)"),
            );
        }
    }

    // Permissions.
    let mut files: Vec<(&str, PathBuf, u32)> = vec![("audit log", c.audit.clone(), 0o007)];
    if let Some((key, witness)) = &c.witness {
        files.push(("signing key", key.clone(), 0o077));
        files.push(("witness", witness.clone(), 0o002));
    }
    if let Some(n) = &c.notify {
        files.push(("link key", n.key_path(&c.audit), 0o077));
    }
    for (what, path, forbidden) in files {
        match mode(&path) {
            Some(m) if m & forbidden != 0 => r.line(
                Level::Fail,
                what,
                &format!("{} has mode {m:04o}", path.display()),
                Some(&format!("`chmod {:o} {}`", m & !forbidden & 0o770, path.display())),
            ),
            Some(m) => r.line(Level::Ok, what, &format!("{} (mode {m:04o})", path.display()), None),
            None if what == "audit log" || what == "link key" => {}
            None => r.line(
                Level::Fail,
                what,
                &format!("{} cannot be read", path.display()),
                Some("`bursar audit keygen` makes a key pair; docs/audit.md"),
            ),
        }
    }

    // Prometheus: every utilisation metric in use is asked (a GPU without the profiling metric is
    // read from DCGM_FI_DEV_GPU_UTIL), and the answer names how many series each has.
    if let Some(u) = &c.utilisation {
        let queries =
            bursar_prometheus::Source::new(u.prometheus.clone()).map(|s| s.utilisation_queries()).unwrap_or_default();
        match u.prometheus.http_client() {
            Err(e) => r.line(Level::Fail, "prometheus", &e.to_string(), None),
            Ok(_) if queries.is_empty() => r.line(
                Level::Warn,
                "prometheus",
                "no metric configured to query",
                Some("docs/integrations/utilisation.md"),
            ),
            Ok(client) => {
                let mut counts = Vec::new();
                let mut failed = None;
                for (name, q) in &queries {
                    let path = format!("/api/v1/query?query={}", bursar_http::encode(q));
                    match client.get(&path) {
                        Ok(resp) if resp.is_success() => {
                            let n = resp
                                .json()
                                .ok()
                                .and_then(|v| v["data"]["result"].as_array().map(Vec::len))
                                .unwrap_or(0);
                            counts.push(format!("{n} series of {name}"));
                            if n > 0 {
                                failed = failed.or(Some(None));
                            }
                        }
                        Ok(resp) => {
                            failed = Some(Some((format!("{} answered {}", u.prometheus.server, resp.status), true)));
                            break;
                        }
                        Err(e) => {
                            failed = Some(Some((e.to_string(), false)));
                            break;
                        }
                    }
                }
                match failed {
                    Some(Some((message, auth))) => r.line(
                        Level::Fail,
                        "prometheus",
                        &message,
                        auth.then_some("check `basic_auth` / `bearer_token_file` in [utilisation.prometheus]"),
                    ),
                    Some(None) => r.line(
                        Level::Ok,
                        "prometheus",
                        &format!("{} answers the queries ({})", u.prometheus.server, counts.join(", ")),
                        None,
                    ),
                    None => r.line(
                        Level::Warn,
                        "prometheus",
                        &format!("{} answers the queries ({})", u.prometheus.server, counts.join(", ")),
                        Some("no series yet: is dcgm-exporter scraped, with its job mapping (`hpc_job`)? docs/integrations/utilisation.md"),
                    ),
                }
            }
        }
    }

    // Notices.
    if let Some(n) = &c.notify {
        match n.sink() {
            Ok(sink) => {
                let result = if args.no_notice { probe_only(&sink) } else { test_notice(&sink, n.base_url()) };
                match result {
                    Ok(what) => r.line(Level::Ok, "notices", &what, None),
                    Err(e) => r.line(Level::Fail, "notices", &e, Some("docs/notifications.md")),
                }
            }
            Err(e) => r.line(Level::Fail, "notices", &e, None),
        }
    }

    // The cluster.
    if let Some(cl) = &resolved.cluster {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::io("cannot start a runtime", e))?;
        let checked = rt.block_on(async {
            tokio::time::timeout(StdDuration::from_secs(25), bursar_cluster::nats::Nats::connect(cl)).await
        });
        match checked {
            Ok(Ok(nats)) => r.line(
                Level::Ok,
                "cluster",
                &format!(
                    "{} answers with a JetStream quorum ({} partitions)",
                    bursar_cluster::nats::redacted(&cl.url),
                    nats.partitions
                ),
                None,
            ),
            Ok(Err(e)) => r.line(
                Level::Fail,
                "cluster",
                &e.to_string(),
                Some("docs/cluster.md: every stream needs a majority of its replicas"),
            ),
            Err(_) => r.line(
                Level::Fail,
                "cluster",
                "no JetStream answer within 25 s",
                Some("a cluster without a quorum answers nothing: start the missing servers"),
            ),
        }
    }

    if r.failed == 0 {
        println!("bursar doctor: ready");
        Ok(ExitCode::Ok)
    } else {
        println!("bursar doctor: {} check(s) failed", r.failed);
        Ok(ExitCode::Failed)
    }
}

fn probe_only(sink: &bursar_notify::SinkKind) -> Result<String, String> {
    match sink {
        bursar_notify::SinkKind::Alertmanager(c) => match c.get("/-/ready") {
            Ok(r) if r.is_success() => Ok(format!("Alertmanager at {} is ready", c.base())),
            Ok(r) => Err(format!("Alertmanager at {} answered {}", c.base(), r.status)),
            Err(e) => Err(e.to_string()),
        },
        bursar_notify::SinkKind::Webhook(c) => Ok(format!("webhook {} (not written to: --no-notice)", c.base())),
    }
}

/// Sends one test notice: an alert that ends within a minute to Alertmanager, a notice marked as a
/// test to a webhook.
fn test_notice(sink: &bursar_notify::SinkKind, base_url: &str) -> Result<String, String> {
    let now = bursar_model::Timestamp::wall_clock();
    let m = bursar_model::api::NoticeMessage {
        id: format!("doctor-{}", now.millis()),
        status: bursar_model::api::NoticeStatus::Firing,
        kind: bursar_model::api::NoticeKind::Alert,
        recipients: Vec::new(),
        job_id: None,
        project: None,
        user: None,
        policies: vec!["bursar/doctor".into()],
        decision: "alert".into(),
        decision_id: format!("doctor-{}", now.millis()),
        summary: "bursar doctor: a test notice (nothing to do)".into(),
        reason: "sent by `bursar doctor` to check that notices arrive".into(),
        starts_at: now.to_string(),
        deadline: None,
        resolved_at: None,
        resolution: None,
        links: Vec::new(),
    };
    match sink {
        bursar_notify::SinkKind::Alertmanager(c) => {
            let alerts = bursar_notify::sink::alerts(&m, now, bursar_model::Duration::minutes(1), base_url);
            bursar_notify::sink::post_alerts(c, &alerts).map_err(|e| e.to_string())?;
            Ok(format!("Alertmanager at {} accepted a test alert (it resolves within a minute)", c.base()))
        }
        bursar_notify::SinkKind::Webhook(c) => {
            bursar_notify::sink::post_webhook(c, &m).map_err(|e| e.to_string())?;
            Ok(format!("the webhook {} accepted a test notice", c.base()))
        }
    }
}
