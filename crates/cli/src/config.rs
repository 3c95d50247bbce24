//! `bursar config check FILE` and `bursar config show FILE`: is the site's configuration valid, and
//! what would `bursar serve --config FILE` run with.
//!
//! `check` reads the file as serve does (every error as `file:line:col` with the line and a
//! did-you-mean), builds the authenticator (which reads the JWT key files), reads the
//! `[utilisation]` and `[notify]` sections with their own crates' checks, and says what it found;
//! exit 1 on any error. `show` prints the effective settings, defaults filled in, as TOML, with
//! every credential redacted (a token hash is shown by its first digits only).

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::{CliError, ErrorFormat, ExitCode};

/// `bursar config …`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// The `config` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file the way `bursar serve --config` reads it; exit 1 on any error.
    ///
    /// Example: bursar config check /etc/bursar/bursar.toml
    Check {
        /// The file.
        #[arg(default_value = "/etc/bursar/bursar.toml")]
        file: PathBuf,
    },
    /// Print the settings `bursar serve --config FILE` would run with, defaults filled in, secrets
    /// redacted.
    ///
    /// Example: bursar config show /etc/bursar/bursar.toml
    Show {
        /// The file.
        #[arg(default_value = "/etc/bursar/bursar.toml")]
        file: PathBuf,
    },
}

fn serve_args(file: &std::path::Path) -> crate::serve::ServeArgs {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Just {
        #[command(flatten)]
        serve: crate::serve::ServeArgs,
    }
    let mut a = Just::parse_from(["bursar"]).serve;
    a.config = Some(file.to_path_buf());
    a
}

/// Runs `bursar config`.
pub fn run(args: &ConfigArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let (ConfigCommand::Check { file } | ConfigCommand::Show { file }) = &args.command;
    let site = match bursar_config::load(file) {
        Ok(s) => s,
        Err(ds) => {
            crate::print_diagnostics(&ds, error_format);
            eprintln!("{}: {} error(s)", file.display(), ds.len());
            return Ok(ExitCode::Failed);
        }
    };
    let auth = match bursar_auth::Authenticator::new(&site.auth) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return Ok(ExitCode::Failed);
        }
    };
    let sargs = serve_args(file);
    let resolved = match crate::serve::settings(&sargs, Some(&site), error_format) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return Ok(ExitCode::Failed);
        }
    };
    if let Err(e) = bursar_serve::check_bind(resolved.listen, &auth) {
        eprintln!("{}: {e}", file.display());
        return Ok(ExitCode::Failed);
    }
    match &args.command {
        ConfigCommand::Check { .. } => {
            let mut found = vec![format!("{} principal(s)", site.auth.principals.len())];
            if !site.capacity.is_empty() {
                let gpus: bursar_model::Gpus = site.capacity.iter().map(|c| c.gpus).sum();
                found.push(format!("{} capacity row(s), {gpus} GPUs", site.capacity.len()));
            }
            for (on, what) in [
                (site.tls.is_some(), "TLS"),
                (site.witness.is_some(), "a witness"),
                (site.cluster.is_some(), "a cluster"),
                (site.utilisation, "utilisation from Prometheus"),
                (site.notify, "notices"),
                (site.auth.jwt.is_some(), "JWTs"),
                (site.auth.munge.is_some(), "MUNGE"),
                (site.auth.proxy.is_some(), "a trusted proxy"),
            ] {
                if on {
                    found.push(what.to_owned());
                }
            }
            if auth.is_open() {
                found.push("no authentication (every caller on loopback has every power)".to_owned());
            }
            println!("{}: valid ({})", file.display(), found.join(", "));
            Ok(ExitCode::Ok)
        }
        ConfigCommand::Show { .. } => {
            print!("{}", show(&site, &resolved));
            Ok(ExitCode::Ok)
        }
    }
}

fn q(p: &std::path::Path) -> String {
    format!("{:?}", p.display().to_string())
}

fn dur(d: std::time::Duration) -> String {
    format!("\"{}\"", bursar_model::Duration(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}

/// The effective settings as TOML, credentials redacted.
fn show(site: &bursar_config::SiteConfig, r: &crate::serve::Resolved) -> String {
    let c = &r.config;
    let mut out =
        format!("# the settings `bursar serve --config {}` runs with (defaults filled in)\n", site.path.display());
    let _ = writeln!(out, "[serve]");
    let _ = writeln!(out, "policies = {}", q(&c.policies));
    let _ = writeln!(out, "audit = {}", q(&c.audit));
    let _ = writeln!(out, "listen = \"{}\"", r.listen);
    if let Some(a) = c.admit_listen {
        let _ = writeln!(out, "admit_listen = \"{a}\"");
    }
    if let Some(p) = &r.port_file {
        let _ = writeln!(out, "port_file = {}", q(p));
    }
    let _ = writeln!(
        out,
        "log_format = \"{}\"",
        if r.log_format == crate::serve::LogFormat::Json { "json" } else { "human" }
    );
    let _ = writeln!(out, "log_level = \"{}\"", format!("{:?}", r.log_level).to_lowercase());
    let _ = writeln!(out, "tick = {}", dur(c.tick));
    let _ = writeln!(out, "snapshot_every = {}", dur(c.snapshot_every));
    let _ = writeln!(out, "debounce = {}", dur(c.debounce));
    let _ = writeln!(out, "watch = {}", c.watch);
    if let Some(s) = &c.socket {
        let _ = writeln!(out, "socket = {}\nsocket_mode = \"{:o}\"", q(s), c.socket_mode);
    }
    let _ = writeln!(out, "allow_empty = {}", r.allow_empty);
    let _ = writeln!(out, "max_body = {}", c.max_body);
    let _ = writeln!(out, "max_connections = {}", c.max_connections);
    let _ = writeln!(out, "max_connections_per_address = {}", c.max_connections_per_address);
    let _ = writeln!(out, "max_unfinished_per_address = {}", c.max_unfinished_per_address);
    if !c.origins.is_empty() {
        let _ = writeln!(out, "origins = {:?}", c.origins);
    }
    let _ = writeln!(out, "header_timeout = {}", dur(c.header_timeout));
    let _ = writeln!(out, "body_timeout = {}", dur(c.body_timeout));
    let _ = writeln!(out, "queue = {}", c.queue);
    let _ = writeln!(out, "fast_commit = {}", !c.durable);
    let _ = writeln!(out, "dedupe_window = \"{}\"", c.engine.dedupe_window);
    let _ = writeln!(out, "stale_after = \"{}\"", c.engine.stale_after);
    let _ = writeln!(out, "\n[clock]\nmax_skew = \"{}\"", c.max_skew);
    if let Some(t) = &c.tls {
        let _ = writeln!(out, "\n[tls]\ncert = {}\nkey = {}", q(&t.cert_file), q(&t.key_file));
        if let Some(ca) = &t.client_ca {
            let _ = writeln!(out, "client_ca = {}", q(ca));
        }
        let _ = writeln!(out, "require_client_cert = {}", t.require_client_cert);
    }
    if let Some((key, file)) = &c.witness {
        let _ = writeln!(
            out,
            "\n[witness]\nsigning_key = {}\nfile = {}\nadopt_unsigned = {}",
            q(key),
            q(file),
            c.adopt_unsigned
        );
    }
    if let Some(cl) = &r.cluster {
        let _ = writeln!(
            out,
            "\n[cluster]\nurls = {:?}\ninstance = {:?}\npartitions = {}\nreplicas = {}",
            redact_url(&cl.url),
            cl.instance,
            cl.partitions,
            cl.replicas
        );
        let _ = writeln!(
            out,
            "lease_ttl = {}\nadmit_timeout = {}\nstream_dedupe_window = {}",
            dur(cl.lease_ttl),
            dur(cl.admit_timeout),
            dur(cl.dedupe_window)
        );
    }
    let a = &site.auth;
    let b = a.budget;
    let _ = writeln!(
        out,
        "\n[budget]\nprincipal_events_per_minute = {}\nprincipal_bytes_per_minute = {}\nperson_events_per_minute = {}\nperson_bytes_per_minute = {}",
        b.principal.events_per_minute,
        b.principal.bytes_per_minute,
        b.person.events_per_minute,
        b.person.bytes_per_minute
    );
    let _ = writeln!(
        out,
        "\n[auth]\npeople = [{}]",
        a.people.iter().map(|r| format!("\"{r}\"")).collect::<Vec<_>>().join(", ")
    );
    if let Some(j) = &a.jwt {
        let _ = writeln!(out, "\n[auth.jwt]");
        if let Some(k) = &j.hs256_key_file {
            let _ = writeln!(out, "hs256_key_file = {}", q(k));
        }
        if let Some(k) = &j.jwks_file {
            let _ = writeln!(out, "jwks_file = {}", q(k));
        }
        if let Some(aud) = &j.audience {
            let _ = writeln!(out, "audience = {aud:?}");
        }
        let _ = writeln!(
            out,
            "user_claim = {:?}\nleeway = \"{}s\"\nmax_lifetime = \"{}s\"",
            j.user_claim, j.leeway_secs, j.max_lifetime_secs
        );
    }
    if let Some(m) = &a.munge {
        let _ = writeln!(out, "\n[auth.munge]\nunmunge = {}\nmunge = {}", q(&m.unmunge), q(&m.munge));
        if let Some(s) = &m.socket {
            let _ = writeln!(out, "socket = {}", q(s));
        }
    }
    if let Some(p) = &a.proxy {
        let addrs: Vec<String> = p.addresses.iter().map(|a| format!("\"{a}\"")).collect();
        let _ = writeln!(out, "\n[auth.proxy]\naddresses = [{}]\nheader = {:?}", addrs.join(", "), p.header);
    }
    for p in &a.principals {
        let _ = writeln!(out, "\n[[principal]]\nname = {:?}", p.name);
        let _ =
            writeln!(out, "roles = [{}]", p.roles.iter().map(|r| format!("\"{r}\"")).collect::<Vec<_>>().join(", "));
        if !p.jobs.is_empty() {
            let _ = writeln!(out, "jobs = {:?}", p.jobs);
        }
        if !p.tokens.is_empty() {
            let shown: Vec<String> = p
                .tokens
                .iter()
                .map(|t| match t.expires {
                    Some(e) => format!("\"sha256:{}… (redacted; expires {e})\"", t.hash.label()),
                    None => format!("\"sha256:{}… (redacted)\"", t.hash.label()),
                })
                .collect();
            let _ = writeln!(out, "tokens = [{}]", shown.join(", "));
        }
        if !p.cert_subjects.is_empty() {
            let _ = writeln!(out, "cert_subjects = {:?}", p.cert_subjects);
        }
        if !p.unix_users.is_empty() {
            let _ = writeln!(out, "unix_users = {:?}", p.unix_users);
        }
        if let Some(b) = p.budget {
            let _ =
                writeln!(out, "events_per_minute = {}\nbytes_per_minute = {}", b.events_per_minute, b.bytes_per_minute);
        }
    }
    for p in &a.persons {
        let _ = writeln!(out, "\n[[person]]\nname = {:?}", p.name);
        let _ =
            writeln!(out, "roles = [{}]", p.roles.iter().map(|r| format!("\"{r}\"")).collect::<Vec<_>>().join(", "));
        if let Some(b) = p.budget {
            let _ =
                writeln!(out, "events_per_minute = {}\nbytes_per_minute = {}", b.events_per_minute, b.bytes_per_minute);
        }
    }
    for c in &site.capacity {
        let _ = writeln!(out, "\n[[capacity]]\nregion = {:?}\ngpu_type = {:?}", c.region, c.gpu_type);
        if !c.queue.is_empty() {
            let _ = writeln!(out, "queue = {:?}", c.queue);
        }
        // A share is TOML text (`"30/7"`), a whole count a number.
        let toml = |g: bursar_model::Gpus| if g.is_whole() { g.to_string() } else { format!("\"{g}\"") };
        let _ = writeln!(out, "gpus = {}\ndrained = {}", toml(c.gpus), toml(c.drained));
        let _ = writeln!(out, "backfill = {:?}", c.backfill.as_deref().unwrap_or("easy"));
    }
    for key in ["utilisation", "notify"] {
        let on = if key == "utilisation" { site.utilisation } else { site.notify };
        if on {
            let _ =
                writeln!(out, "\n# [{key}] as written (its secrets are files: `password_file`, `bearer_token_file`)");
            for line in section_lines(&site.text, key) {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    out
}

/// A NATS URL with its credentials (`user:password@`, `token@`) replaced.
fn redact_url(urls: &str) -> String {
    urls.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}<redacted>@{}", &u[..s + 3], &u[at + 1..]),
            _ => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The lines of a top-level table and its sub-tables, as written.
fn section_lines<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let h = t.trim_start_matches('[').split([']', '.']).next().unwrap_or("").trim();
            inside = h == name;
        }
        if inside {
            out.push(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_credentials_are_redacted() {
        assert_eq!(redact_url("nats://u:p@n1:4222,nats://n2:4222"), "nats://<redacted>@n1:4222,nats://n2:4222");
    }
}
