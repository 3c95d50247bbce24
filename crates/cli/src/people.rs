//! `bursar pending`, `bursar approve JOB`, `bursar reject JOB --reason …`, `bursar keepalive JOB`:
//! what waits for whom, and the answers, from a terminal. They talk to a running `bursar serve`
//! through `bursar-client`'s typed calls (`GET /v1/pending`, `POST /v1/jobs/{id}/…`); serve turns an
//! answer into the ordinary v1 event on the one road, after checking it (see `crates/serve/src/people.rs`).
//!
//! Exit codes: 0 done; 1 refused (unknown job, not pending, not an approver, expired, nothing to keep
//! alive), with serve's sentence; 2 could not ask (serve unreachable, a wrong token, a bad argument).

use std::io::Write;

use bursar_client::{Client, ClientError};
use bursar_model::Timestamp;
use bursar_model::api::{ActionKind, ActionRequest, PendingReply};

use crate::{CliError, ExitCode};

/// Where serve is and how to prove who you are, shared by the four commands.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    #[command(flatten)]
    connect: crate::connect::ConnectArgs,
}

impl ServerArgs {
    fn client(&self) -> Result<Client, CliError> {
        // A person at a login node: MUNGE when the host has it and no token is given.
        self.connect.client(crate::connect::Fallback::MungeIfInstalled)
    }
}

/// Who answers: whoever the credential proves. `--as NAME` asks that it be NAME (serve refuses the
/// answer if the credential is someone else's); a server without principals takes it as given, and
/// `$USER` when it is absent.
#[derive(Debug, Clone, clap::Args)]
pub struct Who {
    /// Answer as NAME: serve checks that the credential (MUNGE, a token, a JWT) is NAME's. Without
    /// principals on the server, the name is taken as given (default `$USER`).
    #[arg(long = "as", value_name = "NAME")]
    pub by: Option<String>,
}

impl Who {
    /// The name to send: `--as`; else, unless a credential given on the command line will say who
    /// it is, `$USER` (then `$LOGNAME`), which an installed MUNGE's credential then must match.
    /// An error when nothing can say who answers.
    fn name(&self, server: &ServerArgs) -> Result<String, CliError> {
        let explicit = server.connect.authenticates(crate::connect::Fallback::Nothing);
        let env =
            || std::env::var("USER").ok().filter(|u| !u.trim().is_empty()).or_else(|| std::env::var("LOGNAME").ok());
        let name = self.by.clone().or_else(|| (!explicit).then(env).flatten()).unwrap_or_default().trim().to_owned();
        if name.is_empty() && !server.connect.authenticates(crate::connect::Fallback::MungeIfInstalled) {
            return Err(CliError::Message(
                "no name to answer as: neither `--as` nor $USER or $LOGNAME is set, and no credential says who you are\n  help: pass `--as NAME`, or prove who you are with `--munge` or `--token-file` (docs/security.md)"
                    .into(),
            ));
        }
        Ok(name)
    }
}

/// Output of `bursar pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// A table for people.
    #[default]
    Human,
    /// serve's JSON answer.
    Json,
}

/// `bursar pending`.
#[derive(Debug, Clone, clap::Args)]
pub struct PendingArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

/// `bursar estimate`.
#[derive(Debug, Clone, clap::Args)]
pub struct EstimateArgs {
    /// GPUs the job would ask for: whole (8), or MIG slices as their share of a GPU (2/7).
    #[arg(long, value_parser = parse_gpus)]
    gpus: bursar_model::Gpus,
    /// The GPU type (as the inventory names it, e.g. H100).
    #[arg(long = "gpu-type", value_name = "TYPE")]
    gpu_type: String,
    /// The time limit the job would ask for, in hours.
    #[arg(long)]
    hours: f64,
    /// Only this region.
    #[arg(long)]
    region: Option<String>,
    /// Only this queue or partition.
    #[arg(long)]
    queue: Option<String>,
    /// The dataset the job reads (as its `job.dataset` names it): a region without a copy of it
    /// (`asset.registered` with a `region`) starts the job only after the copy, which takes what the
    /// placement policy's `cross_region.copy_hours` says.
    #[arg(long)]
    dataset: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

/// `bursar approve JOB`.
#[derive(Debug, Clone, clap::Args)]
pub struct ApproveArgs {
    /// The job (bursar's id).
    job: String,
    #[command(flatten)]
    who: Who,
    /// The job was held because a quota is exhausted: approve it to run over that budget.
    #[arg(long)]
    over_budget: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// `bursar reject JOB --reason TEXT`.
#[derive(Debug, Clone, clap::Args)]
pub struct RejectArgs {
    /// The job (bursar's id).
    job: String,
    /// Why (kept in the audit log with the rejection).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    who: Who,
    #[command(flatten)]
    server: ServerArgs,
}

/// `bursar keepalive JOB`.
#[derive(Debug, Clone, clap::Args)]
pub struct KeepaliveArgs {
    /// The job (bursar's id).
    job: String,
    #[command(flatten)]
    who: Who,
    #[command(flatten)]
    server: ServerArgs,
}

/// serve could not be asked (exit 2), or refused (exit 1, its sentence on stderr).
fn failure(e: ClientError, server: &str) -> Result<ExitCode, CliError> {
    match e {
        ClientError::Transport { source, .. } if source.is_unreachable() => Err(CliError::Message(format!(
            "cannot reach bursar serve at {server}: {}\n  help: is it running there? (`bursar serve --listen {server}`; `--server` names another address)",
            source.to_string().lines().next().unwrap_or_default()
        ))),
        ClientError::Status { status: 401, message, .. } => Err(CliError::Message(format!(
            "bursar serve at {server} did not accept the credential: {message}\n  help: on a Slurm host `--munge` proves who you are; else pass a token with `--token-file` (docs/security.md)"
        ))),
        ClientError::Status { status, message, .. } if (400..500).contains(&status) => {
            eprintln!("bursar: {message}");
            Ok(ExitCode::Failed)
        }
        other => Err(CliError::Message(other.to_string())),
    }
}

fn left(now: Timestamp, t: &str) -> String {
    Timestamp::parse(t).map(|t| bursar_serve::page::countdown(t.since(now))).unwrap_or_else(|_| t.to_owned())
}

fn ago(now: Timestamp, t: &str) -> String {
    Timestamp::parse(t).map(|t| bursar_serve::page::span(now.since(t))).unwrap_or_else(|_| t.to_owned())
}

/// The table `bursar pending` prints: the approvals and idle warnings, then the queue (admitted jobs
/// not started, per queue in order) and the pool's capacity.
pub fn render(p: &PendingReply, now: Timestamp) -> String {
    let mut o = String::new();
    if let Some(who) = &p.for_user {
        o.push_str(&format!("what waits for {who} (without the read power, only what you may answer):\n"));
    }
    if p.approvals.is_empty() && p.idle.is_empty() {
        o.push_str(if p.for_user.is_some() { "nothing waits for you\n" } else { "nothing waits for anyone\n" });
    }
    render_people(p, now, &mut o);
    render_queue(p, now, &mut o);
    o
}

/// The queue and the capacity, as `bursar pending` prints them after what waits for people.
fn render_queue(p: &PendingReply, now: Timestamp, o: &mut String) {
    if !p.queue.is_empty() {
        o.push_str(&format!("queue, admitted and not started ({}):\n", p.queue.len()));
        if p.queue.iter().any(|q| q.reservation_released) {
            o.push_str("  (! after WAITING: its reservation was released as stale; a start reserves it again)\n");
        }
        o.push_str(&format!(
            "  {:<10} {:>3} {:<20} {:<12} {:<10} {:>14} {:>9} {:<22}  why it waits\n",
            "QUEUE", "#", "JOB", "PROJECT", "USER", "GPUS×HOURS", "WAITING", "EXPECTED START"
        ));
        for q in &p.queue {
            let ask = format!(
                "{}{}×{}",
                q.gpu_type.as_deref().map(|t| format!("{t} ")).unwrap_or_default(),
                q.gpus,
                bursar_lang::families::fmt_num(q.requested_hours)
            );
            let start = match &q.start {
                Some(s) => format!(
                    "{}{}",
                    bursar_serve::page::starts_in(now, s),
                    q.region.as_deref().map(|r| format!(" in {r}")).unwrap_or_default()
                ),
                None => "unknown".to_owned(),
            };
            o.push_str(&format!(
                "  {:<10} {:>3} {:<20} {:<12} {:<10} {:>14} {:>9} {:<22}  {}\n",
                if q.queue.is_empty() { "-" } else { &q.queue },
                q.position,
                q.job_id,
                q.project,
                q.user,
                ask,
                if q.reservation_released { format!("{}!", ago(now, &q.since)) } else { ago(now, &q.since) },
                start,
                match (&q.reason_since, &q.estimate_note) {
                    (Some(t), Some(n)) => format!("{} (scheduler, for {}; {n})", q.reason, ago(now, t)),
                    _ => q.reason.clone(),
                }
            ));
        }
    }
    if !p.capacity.is_empty() {
        o.push_str("capacity (GPUs):\n");
        o.push_str(&format!(
            "  {:<12} {:<10} {:<10} {:>5} {:>12} {:>10} {:>9} {:>7} {:>8}  reported\n",
            "REGION", "TYPE", "QUEUE", "FREE", "FREE IN 1H", "IN SERVICE", "ALLOCATED", "DRAINED", "WAITING"
        ));
        for c in &p.capacity {
            o.push_str(&format!(
                "  {:<12} {:<10} {:<10} {:>5} {:>12} {:>10} {:>9} {:>7} {:>8}  {} ago{}\n",
                c.region,
                c.gpu_type,
                if c.queue.is_empty() { "-" } else { &c.queue },
                c.free,
                c.free_in_hour,
                c.in_service,
                c.allocated,
                c.drained,
                c.waiting_jobs,
                ago(now, &c.reported),
                c.source.as_deref().map(|s| format!(" by {s}")).unwrap_or_default()
            ));
        }
    }
}

/// The approvals and idle warnings.
fn render_people(p: &PendingReply, now: Timestamp, o: &mut String) {
    if !p.approvals.is_empty() {
        o.push_str(&format!("waiting for approval ({}):\n", p.approvals.len()));
        o.push_str(&format!(
            "  {:<20} {:<12} {:<10} {:>12} {:>9} {:>10}  {:<16} why\n",
            "JOB", "PROJECT", "USER", "GPUS×HOURS", "WAITING", "EXPIRES IN", "APPROVERS"
        ));
        for a in &p.approvals {
            let who = if a.approvers.is_empty() { "anyone".to_owned() } else { a.approvers.join(",") };
            let ask = format!("{}×{}", a.gpus, bursar_lang::families::fmt_num(a.requested_hours));
            let why = match a.hold_label() {
                Some(l) => format!("[{l}] {}", a.reason),
                None => a.reason.clone(),
            };
            o.push_str(&format!(
                "  {:<20} {:<12} {:<10} {:>12} {:>9} {:>10}  {:<16} {why}\n",
                a.job_id,
                a.project,
                a.user,
                ask,
                ago(now, &a.submitted),
                left(now, &a.expires),
                who
            ));
        }
    }
    if !p.idle.is_empty() {
        o.push_str(&format!("idle, reclaimed unless kept alive ({}):\n", p.idle.len()));
        o.push_str(&format!(
            "  {:<20} {:<12} {:<10} {:>5} {:>10} {:>11}  rule\n",
            "JOB", "PROJECT", "OWNER", "GPUS", "ALERTED", "RECLAIM IN"
        ));
        for i in &p.idle {
            o.push_str(&format!(
                "  {:<20} {:<12} {:<10} {:>5} {:>10} {:>11}  {}\n",
                i.job_id,
                i.project,
                i.user,
                i.gpus,
                format!("{} ago", ago(now, &i.alerted)),
                left(now, &i.reclaim_at),
                i.policy
            ));
        }
    }
}

/// `bursar pending`.
pub fn pending(args: &PendingArgs) -> Result<ExitCode, CliError> {
    let client = args.server.client()?;
    let reply = match client.pending() {
        Ok(r) => r,
        Err(e) => return failure(e, &args.server.connect.server),
    };
    let text = match args.format {
        Format::Json => format!("{}\n", serde_json::to_string(&reply).unwrap_or_default()),
        Format::Human => render(&reply, Timestamp::wall_clock()),
    };
    std::io::stdout().lock().write_all(text.as_bytes()).map_err(|e| CliError::io("write to stdout", e))?;
    Ok(ExitCode::Ok)
}

fn parse_gpus(text: &str) -> Result<bursar_model::Gpus, String> {
    match bursar_model::Gpus::parse(text) {
        Ok(g) if g.is_zero() => Err("a job asks for more than 0 GPUs".to_owned()),
        Ok(g) => Ok(g),
        Err(e) => Err(e.to_string()),
    }
}

/// `bursar estimate`.
pub fn estimate(args: &EstimateArgs) -> Result<ExitCode, CliError> {
    let client = args.server.client()?;
    let reply = match client.estimate(
        args.gpus,
        &args.gpu_type,
        args.hours,
        args.region.as_deref(),
        args.queue.as_deref(),
        args.dataset.as_deref(),
    ) {
        Ok(r) => r,
        Err(e) => return failure(e, &args.server.connect.server),
    };
    let text = match args.format {
        Format::Json => format!("{}\n", serde_json::to_string(&reply).unwrap_or_default()),
        Format::Human => render_estimate(&reply),
    };
    std::io::stdout().lock().write_all(text.as_bytes()).map_err(|e| CliError::io("write to stdout", e))?;
    Ok(ExitCode::Ok)
}

use bursar_model::api::about;

/// The human table of `bursar estimate`: one line per partition, soonest first.
pub fn render_estimate(r: &bursar_model::api::EstimateReply) -> String {
    let mut out = format!("{} × {} for {} h, estimated at {}:\n", r.gpus, r.gpu_type, r.hours, r.now);
    if let Some(note) = &r.note {
        out.push_str(&format!("  {note}\n"));
    }
    for p in &r.partitions {
        let place = if p.queue.is_empty() { p.region.clone() } else { format!("{} / {}", p.region, p.queue) };
        let when = match (&p.start, p.wait_s) {
            (Some(start), Some(w)) => {
                let range = match (&p.earliest, &p.latest) {
                    (Some(e), Some(l)) => format!(" (between {e} and {l})"),
                    _ => String::new(),
                };
                format!("{} — {start}{range}", about(w))
            }
            _ => format!("cannot start: {}", p.reason.as_deref().unwrap_or("no room")),
        };
        out.push_str(&format!(
            "  {place}: {when}\n    {} free of {} in service ({} allocated, {} drained; reported {}), {} running, {} waiting ahead\n",
            p.free, p.in_service, p.allocated, p.drained, p.reported, p.running_jobs, p.waiting_jobs
        ));
        if let Some(d) = &p.dataset {
            out.push_str(&format!("    dataset: {d}\n"));
        }
    }
    out
}

fn act(
    server: &ServerArgs,
    job: &str,
    action: ActionKind,
    by: String,
    reason: Option<String>,
    over_budget: bool,
) -> Result<ExitCode, CliError> {
    let client = server.client()?;
    let id = format!("cli-{}-{job}-{}-{}", action.as_str(), Timestamp::wall_clock().millis(), std::process::id());
    let req = ActionRequest { by, reason, over_budget, id: Some(id) };
    match client.act(job, action, &req) {
        Ok(r) => {
            println!("{}", r.message);
            Ok(ExitCode::Ok)
        }
        Err(e) => failure(e, &server.connect.server),
    }
}

/// `bursar approve JOB`.
pub fn approve(a: &ApproveArgs) -> Result<ExitCode, CliError> {
    let kind = if a.over_budget { ActionKind::ApproveOverBudget } else { ActionKind::Approve };
    act(&a.server, &a.job, kind, a.who.name(&a.server)?, None, a.over_budget)
}

/// `bursar reject JOB --reason TEXT`.
pub fn reject(a: &RejectArgs) -> Result<ExitCode, CliError> {
    if a.reason.trim().is_empty() {
        return Err(CliError::Message("`--reason` must say why the job is rejected".into()));
    }
    act(&a.server, &a.job, ActionKind::Reject, a.who.name(&a.server)?, Some(a.reason.clone()), false)
}

/// `bursar keepalive JOB`.
pub fn keepalive(a: &KeepaliveArgs) -> Result<ExitCode, CliError> {
    act(&a.server, &a.job, ActionKind::Keepalive, a.who.name(&a.server)?, None, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::api::{ApprovalWait, IdleWait};

    #[test]
    fn the_table_says_what_waits_for_whom() {
        let now = Timestamp::parse("2026-11-02T10:00:00Z").unwrap();
        let p = PendingReply {
            engine_time: now.to_string(),
            approvals: vec![ApprovalWait {
                job_id: "j1".into(),
                project: "nlp".into(),
                user: "alice".into(),
                gpus: 64.into(),
                requested_hours: 100.0,
                submitted: "2026-11-02T09:00:00Z".into(),
                expires: "2026-11-03T09:00:00Z".into(),
                approvers: vec!["bob".into()],
                policies: vec!["approval/big".into()],
                reason: "job j1 needs approval".into(),
                over_budget: false,
                held_by: Vec::new(),
                self_approval: false,
            }],
            idle: vec![IdleWait {
                job_id: "j2".into(),
                project: "vision".into(),
                user: "dan".into(),
                gpus: 8.into(),
                alerted: "2026-11-02T09:55:00Z".into(),
                reclaim_at: "2026-11-02T10:25:00Z".into(),
                policy: "reclaim/idle".into(),
                idle_since: None,
                gpu_util: None,
                mem_util: None,
                last_sample: None,
                no_sample: None,
            }],
            capacity: vec![],
            queue: vec![],
            for_user: None,
        };
        let t = render(&p, now);
        assert!(
            t.contains("waiting for approval (1)")
                && t.contains("64×100")
                && t.contains("1h 00m")
                && t.contains("23h 00m"),
            "{t}"
        );
        assert!(
            t.contains("idle, reclaimed unless kept alive (1)") && t.contains("5m 00s ago") && t.contains("25m 00s"),
            "{t}"
        );
        assert_eq!(
            render(
                &PendingReply {
                    engine_time: String::new(),
                    approvals: vec![],
                    idle: vec![],
                    capacity: vec![],
                    queue: vec![],
                    for_user: None
                },
                now
            ),
            "nothing waits for anyone\n"
        );
    }
}
