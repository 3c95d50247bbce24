//! `bursar audit query|explain|verify|prune|stats|head|keygen|migrate|backup` over an audit database, and the
//! journal that `bursar eval --audit FILE` writes through.
//!
//! The journal ([`open_journal`]) is the `bursar-audit` writer thread: the session hands it each
//! applied event and its decisions; the thread commits them in groups and only after each commit
//! writes that group's decisions to stdout. So every decision printed is already in the log (in
//! durable mode: on disk), and a failed commit (disk full, unwritable file) stops `eval` with the
//! reason instead of dropping rows. With `--signing-key` and `--witness` the log signs its head after
//! every commit ([`WitnessOpts`]).
//!
//! `verify --deep` also checks every derived table of `bursar_audit::derived::DERIVED_TABLES`: it
//! rebuilds the report facts (`facts_*`, owned by `bursar-report`) from the log into a scratch copy and
//! compares them with the stored ones ([`deep_check`]); a missing one is a problem.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bursar_audit::query::{Filter, Step, Story};
use bursar_audit::verify::{Problem, ProblemKind, Report};
use bursar_audit::{
    AuditError, AuditLog, Durability, PublicKey, Record, SigningKey, StoredDecision, Witness, Writer, WriterConfig,
};
use bursar_engine::PolicySet;
use bursar_model::Timestamp;

use crate::{CliError, ErrorFormat, ExitCode};

/// How hard each audit commit tries to reach the disk (`--durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DurabilityArg {
    /// Commit with `synchronous=FULL`; decisions are printed only once on disk. The default.
    #[default]
    Durable,
    /// `synchronous=NORMAL`: faster; the last few milliseconds of decisions may be lost on power loss.
    Fast,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Durability {
        match d {
            DurabilityArg::Durable => Durability::Durable,
            DurabilityArg::Fast => Durability::Fast,
        }
    }
}

fn audit_err(e: AuditError) -> CliError {
    CliError::Message(e.to_string())
}

/// Where signed heads go: `--signing-key FILE --witness FILE` of `eval` and `prune`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessOpts {
    /// The Ed25519 secret key file (`bursar audit keygen`).
    pub signing_key: PathBuf,
    /// The append-only file each signed head is appended to.
    pub witness: PathBuf,
    /// `--adopt-unsigned`: sign even over writes no signed head covers, recording the adoption.
    pub adopt_unsigned: bool,
}

impl WitnessOpts {
    /// Both or neither: the flags of `eval` and `prune`.
    pub fn from_flags(
        signing_key: Option<&PathBuf>,
        witness: Option<&PathBuf>,
        adopt_unsigned: bool,
    ) -> Option<WitnessOpts> {
        match (signing_key, witness) {
            (Some(k), Some(w)) => Some(WitnessOpts { signing_key: k.clone(), witness: w.clone(), adopt_unsigned }),
            _ => None,
        }
    }

    /// Reads the key and opens the witness for appending.
    pub fn open(&self) -> Result<Witness, CliError> {
        let key = SigningKey::from_file(&self.signing_key).map_err(audit_err)?;
        Witness::open(key, &self.witness).map_err(audit_err)
    }

    /// Opens the witness and attaches it to `log`, only over signed ground: writes no signed head
    /// covers are refused (the error names them and `--adopt-unsigned`), or adopted with
    /// `--adopt-unsigned` (an `adopt` anchor, signed at once, and a line on stderr).
    pub fn attach(&self, log: &mut AuditLog) -> Result<(), CliError> {
        let w = self.open()?;
        if let Some(standing) = log.attach_witness(w, self.adopt_unsigned).map_err(audit_err)? {
            eprintln!(
                "audit: adopted unsigned writes with --adopt-unsigned (recorded in the log as anchors row {}): {}",
                log.head().0,
                standing.describe(&self.witness)
            );
        }
        Ok(())
    }
}

/// Opens `db` and starts its writer thread as `eval`'s journal: it commits in groups, signs the head
/// after each commit when a witness is given, and prints each group's decisions as JSON lines to
/// `out` only after the commit.
pub fn open_journal(
    db: &Path,
    durability: Durability,
    witness: Option<&WitnessOpts>,
    mut out: Box<dyn Write + Send>,
) -> Result<Writer, CliError> {
    let mut log = AuditLog::open(db, durability).map_err(audit_err)?;
    if let Some(w) = witness {
        w.attach(&mut log)?;
    }
    let mut buf = Vec::with_capacity(64 * 1024);
    Writer::spawn(
        log,
        WriterConfig::default(),
        Box::new(move |records: &[Record], _| {
            for r in records {
                for d in &r.decisions {
                    d.write_line(&mut buf);
                }
            }
            if buf.is_empty() {
                return Ok(());
            }
            out.write_all(&buf)?;
            buf.clear();
            out.flush()
        }),
    )
    .map_err(audit_err)
}

/// `bursar eval --audit DB`: like `eval`, with every event and decision committed to `db` before the
/// decision is printed.
pub fn run_eval(
    set: Arc<PolicySet>,
    input: impl std::io::Read + Send,
    opts: &crate::eval::EvalOptions,
    db: &Path,
    durability: DurabilityArg,
    witness: Option<&WitnessOpts>,
) -> Result<crate::eval::Summary, CliError> {
    let journal = open_journal(db, durability.into(), witness, Box::new(std::io::stdout()))?;
    let (summary, writer) = crate::eval::run(set, input, journal, opts)?;
    let s = writer.finish().map_err(|e| match e {
        AuditError::Output(io) => CliError::io("cannot write decisions", io),
        other => CliError::Message(format!("cannot write decisions: {other}")),
    })?;
    eprintln!(
        "audit: {} events and {} decisions logged to `{}` in {} commits{}",
        s.events,
        s.decisions,
        db.display(),
        s.commits,
        if s.duplicates > 0 { format!(" ({} events were already logged)", s.duplicates) } else { String::new() }
    );
    if let Some(w) = witness {
        eprintln!("audit: signed heads appended to witness `{}`", w.witness.display());
    }
    Ok(summary)
}

/// `bursar audit …`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// The audit database.
    #[arg(long, global = true, default_value = "audit.db")]
    pub db: PathBuf,
    #[command(subcommand)]
    command: AuditCommand,
}

/// Output formats of `audit query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum QueryFormat {
    /// Columns sized to the terminal.
    #[default]
    Table,
    /// One JSON object per line: the decision as emitted plus `seq`, `recorded_at`, `policy_set`.
    Json,
    /// RFC 4180 CSV with a header row.
    Csv,
}

/// Output formats of the other audit commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TextFormat {
    /// For people.
    #[default]
    Text,
    /// One JSON document.
    Json,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum AuditCommand {
    /// List decisions matching filters, oldest first.
    ///
    /// Example: bursar audit query --db audit.db --project nlp --decision deny --since 2026-11-01
    Query {
        /// Project.
        #[arg(long)]
        project: Option<String>,
        /// User.
        #[arg(long)]
        user: Option<String>,
        /// Job id.
        #[arg(long)]
        job: Option<String>,
        /// Decision kind: allow, deny, require_approval, defer, reclaim, alert.
        #[arg(long, value_parser = parse_kind)]
        decision: Option<String>,
        /// A policy id that produced the decision; `*` is a wildcard (`quota/*`).
        #[arg(long)]
        policy: Option<String>,
        /// Event time at or after: RFC 3339 or a date (`2026-11-02`, midnight UTC).
        #[arg(long, value_parser = parse_when)]
        since: Option<Timestamp>,
        /// Event time before: RFC 3339 or a date.
        #[arg(long, value_parser = parse_when)]
        until: Option<Timestamp>,
        /// Only decisions of dry-run policies.
        #[arg(long, conflicts_with = "enforced")]
        dry_run: bool,
        /// Only enforced decisions (no dry-run).
        #[arg(long)]
        enforced: bool,
        /// At most this many decisions.
        #[arg(long)]
        limit: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = QueryFormat::Table)]
        format: QueryFormat,
    },
    /// The pool's inventory over time: every `pool.inventory` row the log holds (per region, GPU
    /// type and queue: in service, allocated, free, drained), oldest first.
    ///
    /// Example: bursar audit inventory --db audit.db --gpu-type H100 --since 2026-11-01 --format csv
    Inventory {
        /// Only this region.
        #[arg(long)]
        region: Option<String>,
        /// Only this GPU type.
        #[arg(long = "gpu-type", value_name = "TYPE")]
        gpu_type: Option<String>,
        /// Reported at or after: RFC 3339 or a date (`2026-11-02`, midnight UTC).
        #[arg(long, value_parser = parse_when)]
        since: Option<Timestamp>,
        /// Reported before: RFC 3339 or a date.
        #[arg(long, value_parser = parse_when)]
        until: Option<Timestamp>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = QueryFormat::Table)]
        format: QueryFormat,
    },
    /// Tell one job's story: its events and decisions in order, with reasons, policies and policy set.
    ///
    /// Example: bursar audit explain --db audit.db j42
    Explain {
        /// The job id.
        job: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = TextFormat::Text)]
        format: TextFormat,
    },
    /// Re-walk the hash chains and check them against one another; name the first problem and exit 1.
    ///
    /// With --witness: also check the log against every signed head in that file, which catches
    /// truncation, rollback and a full re-hash, and fails when writes follow the newest signed head
    /// (unless --allow-unsigned-tail). With --deep: also check every derived table. See docs/audit.md,
    /// "What verify proves".
    ///
    /// Example: bursar audit verify --db audit.db --witness /var/log/bursar/witness.jsonl --public-key audit.pub
    Verify {
        /// Output format.
        #[arg(long, value_enum, default_value_t = TextFormat::Text)]
        format: TextFormat,
        /// A witness file (or any text holding signed-head lines, a syslog extract say) to check against.
        #[arg(long, value_name = "FILE")]
        witness: Option<PathBuf>,
        /// With --witness: accept only heads signed by this public key (from `bursar audit keygen`).
        #[arg(long, value_name = "FILE", requires = "witness")]
        public_key: Option<PathBuf>,
        /// With --witness: writes after the newest signed head are a note, not a failure (a log
        /// `serve` is writing, which signs at most once a second).
        #[arg(long, requires = "witness")]
        allow_unsigned_tail: bool,
        /// Also check every derived table (docs/audit.md, "Derived tables"): rebuild the report facts
        /// (`facts_*`) from the log in a scratch copy and compare; a missing one is a problem.
        #[arg(long)]
        deep: bool,
    },
    /// Delete events and decisions older than a date, keeping the rest verifiable with a checkpoint.
    ///
    /// The log of a running `bursar serve` is pruned through it: --server ADDR (the admin power);
    /// serve verifies, snapshots and prunes on its own writer while it goes on admitting. A log no
    /// process writes is pruned with --db. A log kept with a witness must be pruned with
    /// --signing-key and --witness (through serve: serve's own [witness] signs), else `verify
    /// --witness` reports the unsigned checkpoint.
    ///
    /// Example: bursar audit prune --server 127.0.0.1:7878 --token-file /etc/bursar/admin.token --before 2026-01-01
    Prune {
        /// Remove rows whose event time is before this (RFC 3339 or a date).
        #[arg(long, value_parser = parse_when)]
        before: Timestamp,
        /// Prune the log of the `bursar serve` listening here (a URL, or HOST:PORT for plain HTTP)
        /// instead of opening --db: serve is the one writer of its log.
        #[arg(long, value_name = "URL", conflicts_with_all = ["signing_key", "witness", "adopt_unsigned"])]
        server: Option<String>,
        /// With --server: the CA certificate(s) serve's TLS certificate is checked against.
        #[arg(long, value_name = "FILE", requires = "server")]
        ca_file: Option<PathBuf>,
        /// With --server: a file holding a token of a principal with the admin power.
        #[arg(long, value_name = "FILE", env = "BURSAR_TOKEN_FILE", requires = "server")]
        token_file: Option<PathBuf>,
        /// Sign the pruned log's head with this key.
        #[arg(long, value_name = "FILE", requires = "witness")]
        signing_key: Option<PathBuf>,
        /// Append the signed head to this witness.
        #[arg(long, value_name = "FILE", requires = "signing_key")]
        witness: Option<PathBuf>,
        /// With --signing-key: sign even if the log holds writes no signed head covers, recording
        /// the adoption in the log (without it such a log is refused).
        #[arg(long, requires = "signing_key")]
        adopt_unsigned: bool,
    },
    /// Print the log's current signed head: one JSON line for a ticket, a runbook or another system.
    ///
    /// With --signing-key the current head is verified, signed and printed (and appended to --witness
    /// if given); with --witness alone the newest signed head in it is checked against the log and
    /// printed.
    ///
    /// Example: bursar audit head --db audit.db --signing-key /etc/bursar/audit.key
    Head {
        /// Sign the current head with this key.
        #[arg(long, value_name = "FILE")]
        signing_key: Option<PathBuf>,
        /// Append the signed head to this witness (with --signing-key), or read the newest one from it.
        #[arg(long, value_name = "FILE")]
        witness: Option<PathBuf>,
        /// With --signing-key and a witness that already holds this key's heads of the log: sign
        /// even though writes follow the newest of them, recording the adoption in the log (without
        /// it such a log is refused: signing would vouch for whatever was appended).
        #[arg(long, requires_all = ["signing_key", "witness"])]
        adopt_unsigned: bool,
    },
    /// Write a new Ed25519 key pair for signed heads: PREFIX.key (mode 0600) and PREFIX.pub.
    ///
    /// Keep PREFIX.key away from the database's editors (another user, a secrets store); give
    /// PREFIX.pub to whoever runs `verify --witness --public-key`.
    ///
    /// Example: bursar audit keygen --out /etc/bursar/audit
    Keygen {
        /// Path prefix of the two files.
        #[arg(long, value_name = "PREFIX")]
        out: PathBuf,
    },
    /// Bring an audit log written by an older bursar to this one's schema, then verify it.
    ///
    /// The readers (verify, explain, query, stats, report) never migrate a file; `serve` and `eval
    /// --audit` migrate it when they open it, and this does it on its own, with nothing else. Back the
    /// file up first (`bursar audit backup`): an older bursar refuses a migrated file (docs/operations.md,
    /// "Upgrade and rollback").
    ///
    /// With --backup-to, a file older than this bursar is first copied there (`audit backup`'s
    /// online copy), so that the copy exists before anything changes; a file of this schema is left
    /// alone and no copy is made. The package's maintainer scripts migrate this way before the new
    /// serve starts, and a downgrade restores that copy (docs/operations.md).
    ///
    /// Example: bursar audit migrate --db /var/lib/bursar/audit.db --backup-to /srv/backup/audit-before-upgrade.db
    Migrate {
        /// Before migrating an older file, copy it here (refused if it exists).
        #[arg(long, value_name = "FILE")]
        backup_to: Option<PathBuf>,
    },
    /// Copy the log, as it is at one instant, to a new file while serve keeps writing; verify the copy.
    ///
    /// SQLite's online backup in one read transaction: the copy holds every commit up to that
    /// instant and none after, as one self-contained file (mode 0640). A copy of this bursar's schema
    /// is verified at once (exit 1 if it does not verify); an older one is copied as it is. The
    /// witness and the link key (`<db>.link-key`) are files of their own: copy them too
    /// (docs/operations.md, "Back up").
    ///
    /// Example: bursar audit backup --db /var/lib/bursar/audit.db --out /srv/backup/audit-2026-12-03.db
    Backup {
        /// The new file (refused if it exists).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Summarise decisions by kind, policy and project, and what dry-run policies would have changed.
    Stats {
        /// Period start (inclusive): RFC 3339 or a date.
        #[arg(long, value_parser = parse_when)]
        since: Option<Timestamp>,
        /// Period end (exclusive).
        #[arg(long, value_parser = parse_when)]
        until: Option<Timestamp>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = TextFormat::Text)]
        format: TextFormat,
    },
}

fn parse_kind(s: &str) -> Result<String, String> {
    match bursar_model::DecisionKind::parse(s) {
        Some(k) => Ok(k.as_str().to_owned()),
        None => Err(format!("`{s}` is not a decision kind (allow, deny, require_approval, defer, reclaim, alert)")),
    }
}

/// Parses RFC 3339 or a bare date (midnight UTC).
pub fn parse_when(s: &str) -> Result<Timestamp, String> {
    if s.len() == 10 {
        return Timestamp::parse(&format!("{s}T00:00:00Z"))
            .map_err(|_| format!("`{s}` is not a date (expected e.g. `2026-11-02` or `2026-11-02T09:00:00Z`)"));
    }
    Timestamp::parse(s).map_err(|e| e.to_string())
}

/// Runs an `audit` subcommand.
pub fn run(args: &AuditArgs, _format: ErrorFormat) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| CliError::io("cannot write the answer", e);
    match &args.command {
        AuditCommand::Query {
            project,
            user,
            job,
            decision,
            policy,
            since,
            until,
            dry_run,
            enforced,
            limit,
            format,
        } => {
            let log = AuditLog::open_read(&args.db).map_err(audit_err)?;
            let filter = Filter {
                project: project.clone(),
                user: user.clone(),
                job: job.clone(),
                decision: decision.clone(),
                policy: policy.clone(),
                since: since.map(Timestamp::millis),
                until: until.map(Timestamp::millis),
                dry_run: if *dry_run {
                    Some(true)
                } else if *enforced {
                    Some(false)
                } else {
                    None
                },
                limit: *limit,
            };
            query(&log, &filter, *format, &mut out)?;
            out.flush().map_err(io)?;
            Ok(ExitCode::Ok)
        }
        AuditCommand::Inventory { region, gpu_type, since, until, format } => {
            let log = AuditLog::open_read(&args.db).map_err(audit_err)?;
            let pick = InventoryPick { region: region.as_deref(), gpu_type: gpu_type.as_deref() };
            inventory(&log, &pick, since.map(Timestamp::millis), until.map(Timestamp::millis), *format, &mut out)?;
            out.flush().map_err(io)?;
            Ok(ExitCode::Ok)
        }
        AuditCommand::Explain { job, format } => {
            let log = AuditLog::open_read(&args.db).map_err(audit_err)?;
            let story = bursar_audit::query::explain(&log, job).map_err(audit_err)?;
            if story.steps.is_empty() && story.refused.is_empty() {
                match story.pruned {
                    Some((through, before)) => eprintln!(
                        "bursar: job `{job}` is not in `{}`; the events before {} were pruned (through event seq {through}), so its story may have been among them",
                        args.db.display(),
                        Timestamp(before)
                    ),
                    None => eprintln!("bursar: job `{job}` is not in `{}`", args.db.display()),
                }
                return Ok(ExitCode::Failed);
            }
            match format {
                TextFormat::Json => {
                    let s = serde_json::to_string(&story).map_err(|e| CliError::Message(e.to_string()))?;
                    writeln!(out, "{s}").map_err(io)?;
                }
                TextFormat::Text => write_story(&story, &mut out).map_err(io)?,
            }
            out.flush().map_err(io)?;
            Ok(ExitCode::Ok)
        }
        AuditCommand::Verify { format, witness, public_key, allow_unsigned_tail, deep } => {
            // The witness first, then the log at one instant (one read transaction): a head signed
            // after the witness was read is not in it, and every row committed after the log's
            // instant is outside it, so a log a server writes meanwhile verifies as it was then.
            let lines = witness.as_deref().map(bursar_audit::witness::read).transpose().map_err(audit_err)?;
            let log = AuditLog::open_read_pinned(&args.db).map_err(audit_err)?;
            let mut rep = match lines {
                Some(lines) => {
                    let pinned = public_key.as_deref().map(PublicKey::from_file).transpose().map_err(audit_err)?;
                    let mut rep =
                        bursar_audit::verify::verify_with_witness(&log, &lines, pinned.as_ref()).map_err(audit_err)?;
                    match (bursar_audit::verify::unsigned_tail(&rep), &rep.witness) {
                        (Some(_), Some(w)) if *allow_unsigned_tail => {
                            let n = w.unwitnessed_anchors;
                            rep.notes.push(format!(
                                "{n} unsigned write{} ({}) after the newest signed head (anchors row {}): allowed with `--allow-unsigned-tail`",
                                if n == 1 { "" } else { "s" },
                                bursar_audit::trust::anchors_range(w.signed_anchor + 1, w.signed_anchor + n),
                                w.signed_anchor
                            ));
                        }
                        (Some(p), _) => rep.push(p),
                        (None, _) => {}
                    }
                    rep
                }
                None => bursar_audit::verify::verify(&log).map_err(audit_err)?,
            };
            drop(log);
            if *deep {
                deep_check(&args.db, &mut rep)?;
            }
            match format {
                TextFormat::Json => {
                    let s = serde_json::to_string(&rep).map_err(|e| CliError::Message(e.to_string()))?;
                    writeln!(out, "{s}").map_err(io)?;
                }
                TextFormat::Text => write_verify(&rep, &args.db, &mut out).map_err(io)?,
            }
            out.flush().map_err(io)?;
            if rep.is_ok() {
                return Ok(ExitCode::Ok);
            }
            for p in &rep.problems {
                eprintln!("bursar: `{}` does not verify: {}", args.db.display(), p.message);
            }
            Ok(ExitCode::Failed)
        }
        AuditCommand::Prune { before, server: Some(server), ca_file, token_file, .. } => {
            let connect = crate::connect::ConnectArgs {
                server: server.clone(),
                ca_file: ca_file.clone(),
                token_file: token_file.clone(),
                client_cert: None,
                client_key: None,
                munge: false,
                munge_socket: None,
            };
            let client = connect.client(crate::connect::Fallback::Nothing)?;
            let rep = client.prune(*before).map_err(|e| CliError::Message(e.to_string()))?;
            writeln!(
                out,
                "pruned {} events (through seq {}) and {} decisions (through seq {}) before {before} through serve at {}; \
                 checkpoints recorded after an engine snapshot at event {}",
                rep.events,
                rep.events_through,
                rep.decisions,
                rep.decisions_through,
                client.server(),
                rep.snapshot_event_seq
            )
            .map_err(io)?;
            Ok(ExitCode::Ok)
        }
        AuditCommand::Prune { before, signing_key, witness, adopt_unsigned, .. } => {
            let witness = WitnessOpts::from_flags(signing_key.as_ref(), witness.as_ref(), *adopt_unsigned);
            let mut log = AuditLog::open(&args.db, Durability::Durable).map_err(audit_err)?;
            if let Some(w) = &witness {
                w.attach(&mut log)?;
            }
            let rep = bursar_audit::verify::prune(&mut log, before.millis()).map_err(audit_err)?;
            writeln!(
                out,
                "pruned {} events (through seq {}) and {} decisions (through seq {}) before {before}; checkpoints recorded{}",
                rep.events,
                rep.events_through,
                rep.decisions,
                rep.decisions_through,
                if log.witness().is_some_and(|w| w.signed() > 0) { " and signed" } else { "" }
            )
            .map_err(io)?;
            // A log serve writes (one with snapshots) restarts from a snapshot after the prune; say so
            // when none is left: every snapshot it holds is then among the restore point's rejected.
            let point = if rep.events > 0 { Some(log.restore_point().map_err(audit_err)?) } else { None };
            if point.is_some_and(|p| p.snapshot.is_none() && !p.rejected.is_empty()) {
                eprintln!(
                    "bursar audit prune: warning: no usable engine snapshot at or after event {} is left, so `bursar serve` \
                     will not start from this log (the pruned events' jobs and usage would be lost)\n  \
                     help: let serve take one first (`POST /v1/snapshot`, or wait for `--snapshot-every`), or restore \
                     the copy taken before the prune; `serve --replay-after-prune` starts without them",
                    rep.events_through
                );
            }
            Ok(ExitCode::Ok)
        }
        AuditCommand::Head { signing_key, witness, adopt_unsigned } => {
            run_head(&args.db, signing_key.as_deref(), witness.as_deref(), *adopt_unsigned, &mut out)
        }
        AuditCommand::Keygen { out: prefix } => {
            let secret = with_ext(prefix, "key");
            let public = with_ext(prefix, "pub");
            let key = SigningKey::generate().map_err(audit_err)?;
            key.write_pair(&secret, &public).map_err(audit_err)?;
            writeln!(out, "wrote {} (secret, mode 0600) and {}", secret.display(), public.display()).map_err(io)?;
            writeln!(out, "public key {}", key.public().to_hex()).map_err(io)?;
            Ok(ExitCode::Ok)
        }
        AuditCommand::Migrate { backup_to } => run_migrate(&args.db, backup_to.as_deref(), &mut out),
        AuditCommand::Backup { out: dest } => run_backup(&args.db, dest, &mut out),
        AuditCommand::Stats { since, until, format } => {
            let log = AuditLog::open_read(&args.db).map_err(audit_err)?;
            let st = bursar_audit::query::stats(&log, since.map(Timestamp::millis), until.map(Timestamp::millis))
                .map_err(audit_err)?;
            match format {
                TextFormat::Json => {
                    let s = serde_json::to_string(&st).map_err(|e| CliError::Message(e.to_string()))?;
                    writeln!(out, "{s}").map_err(io)?;
                }
                TextFormat::Text => write_stats(&st, &mut out).map_err(io)?,
            }
            out.flush().map_err(io)?;
            Ok(ExitCode::Ok)
        }
    }
}

fn ts(ms: i64) -> String {
    Timestamp(ms).to_string()
}

fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// `bursar audit migrate`: the migration a writer makes on open, on its own, then a verify of the result.
fn run_migrate(db: &Path, backup_to: Option<&Path>, out: &mut dyn Write) -> Result<ExitCode, CliError> {
    let io = |e: std::io::Error| CliError::io("cannot write the answer", e);
    let found = bursar_audit::schema::file_version(db).map_err(audit_err)?;
    let to = bursar_audit::schema::SCHEMA_VERSION;
    if found == 0 {
        return Err(CliError::Message(format!(
            "`{}` is not a bursar audit log (an SQLite file without bursar's schema): nothing to migrate",
            db.display()
        )));
    }
    if found == to {
        writeln!(out, "`{}` has schema version {to} already: nothing to migrate", db.display()).map_err(io)?;
    } else {
        if found < to
            && let Some(copy) = backup_to
        {
            // Under the writer lock, so nothing writes between the copy and the migration.
            let lock = bursar_audit::WriterLock::acquire(db).map_err(audit_err)?;
            AuditLog::backup(db, copy).map_err(audit_err)?;
            drop(lock);
            writeln!(out, "backed up `{}` (schema version {found}) to `{}`", db.display(), copy.display())
                .map_err(io)?;
        }
        // Opening for writing runs every step the file lacks, each in one transaction (a newer file
        // is refused with its own message).
        drop(AuditLog::open(db, Durability::Durable).map_err(audit_err)?);
        writeln!(out, "migrated `{}` from schema version {found} to {to}", db.display()).map_err(io)?;
    }
    let log = AuditLog::open_read(db).map_err(audit_err)?;
    let rep = bursar_audit::verify::verify(&log).map_err(audit_err)?;
    write_verify(&rep, db, out).map_err(io)?;
    if rep.is_ok() {
        return Ok(ExitCode::Ok);
    }
    for p in &rep.problems {
        eprintln!("bursar: `{}` does not verify: {}", db.display(), p.message);
    }
    Ok(ExitCode::Failed)
}

/// `bursar audit backup`: an online copy of one instant, verified when it is of this schema.
fn run_backup(db: &Path, dest: &Path, out: &mut dyn Write) -> Result<ExitCode, CliError> {
    let io = |e: std::io::Error| CliError::io("cannot write the answer", e);
    AuditLog::backup(db, dest).map_err(audit_err)?;
    let version = bursar_audit::schema::file_version(dest).map_err(audit_err)?;
    let to = bursar_audit::schema::SCHEMA_VERSION;
    let bytes = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
    writeln!(out, "backed up `{}` to `{}` ({bytes} bytes, schema version {version})", db.display(), dest.display())
        .map_err(io)?;
    if version != to {
        writeln!(
            out,
            "note: not verified: schema version {version} is not this bursar's ({to}); verify it with the bursar that wrote it, or migrate a copy"
        )
        .map_err(io)?;
        return Ok(ExitCode::Ok);
    }
    let log = AuditLog::open_read(dest).map_err(audit_err)?;
    let rep = bursar_audit::verify::verify(&log).map_err(audit_err)?;
    drop(log);
    write_verify(&rep, dest, out).map_err(io)?;
    if rep.is_ok() {
        return Ok(ExitCode::Ok);
    }
    for p in &rep.problems {
        eprintln!("bursar: the backup `{}` does not verify: {}", dest.display(), p.message);
    }
    Ok(ExitCode::Failed)
}

/// `bursar audit head`: sign the current head (verifying the log first), or show the witness's newest.
fn run_head(
    db: &Path,
    key: Option<&Path>,
    witness: Option<&Path>,
    adopt_unsigned: bool,
    out: &mut dyn Write,
) -> Result<ExitCode, CliError> {
    let io = |e: std::io::Error| CliError::io("cannot write the answer", e);
    let log = AuditLog::open_read(db).map_err(audit_err)?;
    match (key, witness) {
        (Some(key), witness) => {
            let rep = bursar_audit::verify::verify(&log).map_err(audit_err)?;
            if let Some(p) = rep.problems.first() {
                eprintln!(
                    "bursar: refusing to sign the head of `{}`: it does not verify: {}\n  help: run `bursar audit verify` and investigate first; signing would vouch for the edit",
                    db.display(),
                    p.message
                );
                return Ok(ExitCode::Failed);
            }
            let key_path = key;
            let key = SigningKey::from_file(key).map_err(audit_err)?;
            // A witness that already vouches for this log with this key is signed ground: writes
            // after its newest head are signed over only with --adopt-unsigned, recorded in the log
            // (issue 36: an operator's routine signing must not launder an append). A witness that
            // holds no head of this log by this key (a new key's first signature) starts here.
            if let Some(w) = witness {
                let standing = bursar_audit::trust::standing(&log, w, &key.public()).map_err(audit_err)?;
                let vouched_before = standing.vouched.is_some() || standing.ahead.is_some();
                if vouched_before && !standing.is_clean() {
                    if !adopt_unsigned {
                        // A rolled-back or rewritten log is not writes bursar stopped before
                        // signing: its help does not offer adopting it as if it were (issue 46).
                        if standing.ahead.is_some() {
                            let e = AuditError::RolledBack { path: db.display().to_string(), what: standing.why(w) };
                            eprintln!("bursar: refusing to sign the head: {e}");
                            return Ok(ExitCode::Failed);
                        }
                        eprintln!(
                            "bursar: refusing to sign the head of `{}`: {}\n  help: if bursar stopped before signing them (it was killed: `serve` signs at most once a second), check the log with `bursar audit verify --db {}` and run again with `--adopt-unsigned`, which records the adoption in the log; otherwise something else wrote to the database: investigate first, signing would vouch for it",
                            db.display(),
                            standing.describe(w),
                            db.display()
                        );
                        return Ok(ExitCode::Failed);
                    }
                    drop(log);
                    let mut log = AuditLog::open(db, bursar_audit::Durability::Durable).map_err(audit_err)?;
                    let opts = WitnessOpts {
                        signing_key: key_path.to_path_buf(),
                        witness: w.to_path_buf(),
                        adopt_unsigned: true,
                    };
                    // Adopts (an `adopt` anchor) and signs it at once.
                    opts.attach(&mut log)?;
                    drop(log);
                    let lines = bursar_audit::witness::read(w).map_err(audit_err)?;
                    let newest = lines.iter().rev().find_map(|(_, l)| l.as_ref().ok());
                    let Some(head) = newest else {
                        return Err(CliError::Message(format!("witness `{}` holds no signed head", w.display())));
                    };
                    writeln!(out, "{}", head.to_line()).map_err(io)?;
                    eprintln!(
                        "signed head of `{}` after adopting unsigned writes: anchors row {}; appended to `{}`",
                        db.display(),
                        head.anchors.seq,
                        w.display()
                    );
                    return Ok(ExitCode::Ok);
                }
            }
            let head = bursar_audit::witness::sign_now(&log, &key).map_err(audit_err)?;
            let line = head.to_line();
            if let Some(w) = witness {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(w)
                    .map_err(|e| CliError::io(format!("cannot open witness `{}`", w.display()), e))?;
                f.write_all(format!("{line}\n").as_bytes())
                    .and_then(|()| f.sync_data())
                    .map_err(|e| CliError::io(format!("cannot append to witness `{}`", w.display()), e))?;
            }
            writeln!(out, "{line}").map_err(io)?;
            eprintln!(
                "signed head of `{}`: anchors row {}, events through {}, decisions through {} (key {}…){}",
                db.display(),
                head.anchors.seq,
                head.events.seq,
                head.decisions.seq,
                head.key.get(..16).unwrap_or(&head.key),
                witness.map(|w| format!("; appended to `{}`", w.display())).unwrap_or_default()
            );
            Ok(ExitCode::Ok)
        }
        (None, Some(w)) => {
            let lines = bursar_audit::witness::read(w).map_err(audit_err)?;
            let rep = bursar_audit::verify::verify_with_witness(&log, &lines, None).map_err(audit_err)?;
            if let Some(p) = rep.problems.first() {
                eprintln!("bursar: `{}` does not verify: {}", db.display(), p.message);
                return Ok(ExitCode::Failed);
            }
            let newest = lines.iter().rev().find_map(|(_, l)| l.as_ref().ok());
            match newest {
                Some(h) => {
                    writeln!(out, "{}", h.to_line()).map_err(io)?;
                    let after = rep.witness.map_or(0, |w| w.unwitnessed_anchors);
                    eprintln!(
                        "newest signed head in `{}`: anchors row {}, signed {}; {after} write(s) since",
                        w.display(),
                        h.anchors.seq,
                        ts(h.at)
                    );
                    Ok(ExitCode::Ok)
                }
                None => Err(CliError::Message(format!("witness `{}` holds no signed head", w.display()))),
            }
        }
        (None, None) => Err(CliError::Message(
            "`audit head` needs --signing-key (sign the current head) or --witness (show the newest signed one)\n  help: create a key with `bursar audit keygen --out PREFIX`".to_owned(),
        )),
    }
}

fn write_verify(rep: &Report, db: &Path, out: &mut dyn Write) -> std::io::Result<()> {
    for c in &rep.chains {
        let from = if c.from_seq > 0 { format!(" (after prune checkpoint {})", c.from_seq) } else { String::new() };
        writeln!(
            out,
            "{:<13} {:>10} rows, through {}{from}, head {}",
            c.chain,
            c.rows,
            c.last_seq,
            c.head.get(..16).unwrap_or(&c.head)
        )?;
    }
    if let Some(w) = &rep.witness {
        let keys: Vec<&str> = w.keys.iter().map(|k| k.get(..16).unwrap_or(k)).collect();
        writeln!(
            out,
            "witness       {:>10} signed heads (key {}), the newest covers anchors row {}{}; {} write(s) after it",
            w.lines,
            if keys.is_empty() { "-".to_owned() } else { keys.join("…, ") + "…" },
            w.signed_anchor,
            if w.signed_at > 0 { format!(", signed {}", ts(w.signed_at)) } else { String::new() },
            w.unwitnessed_anchors
        )?;
    }
    for n in &rep.notes {
        writeln!(out, "note: {n}")?;
    }
    if rep.is_ok() {
        writeln!(out, "ok: `{}` verifies", db.display())?;
    }
    Ok(())
}

/// `verify --deep`: every derived table in [`bursar_audit::derived::DERIVED_TABLES`] is checked.
///
/// The ones the audit log writes (`lifecycle`, the look-up tables) every `verify` checks already,
/// and a missing one is its problem there. The report facts (`facts_*`, `bursar-report`) are rebuilt
/// here: both sides are computed on scratch copies of the file, never on it: copy A brings the
/// stored facts up to date incrementally (as `report` would), copy B drops them and rebuilds them
/// from the whole log; every row of every table must agree. A facts table missing from the file is a
/// problem, not a skip (dropping `facts_meta` alone, say, made `--deep` compare nothing while edited
/// facts stayed for the next report to build on); a log whose report facts were never built fails
/// too, with the help line that builds them. Without the audit log's own derived tables (which
/// `verify` reports missing) or on a pruned log (the facts of pruned rows cannot be re-derived), the
/// facts are not compared, and a note says why.
pub fn deep_check(db: &Path, rep: &mut Report) -> Result<(), CliError> {
    use bursar_audit::derived::{Check, Owner, derived_tables, missing_tables};
    let facts: Vec<_> = derived_tables(Owner::Report, Check::Rebuild).collect();
    let names: Vec<&str> = facts.iter().map(|t| t.name).collect();
    let missing = missing_tables(db, &facts).map_err(audit_err)?;
    for t in &missing {
        rep.push(bursar_audit::verify::missing_table(t, &db.display().to_string()));
    }
    if !missing.is_empty() {
        // The rebuild writes the missing tables afresh beside the edited ones: a comparison would
        // only repeat the problem.
        rep.notes.push(format!(
            "report facts not compared: {} of the {} tables of the report facts {} missing",
            missing.len(),
            names.len(),
            if missing.len() == 1 { "is" } else { "are" }
        ));
        return Ok(());
    }
    // The rebuild reads the derived tables of the audit log (the job steps): one missing is
    // `verify`'s problem already, and there is nothing to rebuild the facts from.
    let ours: Vec<_> = bursar_audit::derived::DERIVED_TABLES.iter().filter(|t| t.owner == Owner::Audit).collect();
    let gone = missing_tables(db, &ours).map_err(audit_err)?;
    if !gone.is_empty() {
        rep.notes.push(format!(
            "report facts not compared: {} of the audit log {} missing, and the rebuild reads {}",
            gone.join(", "),
            if gone.len() == 1 { "is" } else { "are" },
            if gone.len() == 1 { "it" } else { "them" }
        ));
        return Ok(());
    }
    if rep.chains.iter().any(|c| (c.chain == "events" || c.chain == "decisions") && c.from_seq > 0) {
        rep.notes.push(
            "facts not compared: the log was pruned, and the facts of pruned rows cannot be re-derived from it".into(),
        );
        return Ok(());
    }
    let scratch =
        std::env::temp_dir().join(format!("bursar-verify-deep-{}-{}", std::process::id(), bursar_audit::wall_ms()));
    std::fs::create_dir_all(&scratch).map_err(|e| CliError::io(format!("cannot create `{}`", scratch.display()), e))?;
    let result = deep_compare(db, &scratch, &names);
    let _ = std::fs::remove_dir_all(&scratch);
    let diffs = result?;
    if diffs.is_empty() {
        // The five tables `--deep` compared first are named as before (scripts read that line), then
        // the ones it left out until it read the list of derived tables.
        let (later, first): (Vec<&str>, Vec<&str>) =
            names.iter().partition(|t| matches!(**t, "facts_meta" | "facts_prevented"));
        rep.notes.push(format!(
            "report facts: the {} facts_* tables match a rebuild from the log, and so do {}: all {} tables of the report facts ({})",
            first.len(),
            later.join(" and "),
            names.len(),
            names.join(", ")
        ));
    }
    for d in diffs {
        rep.push(Problem {
            chain: d.table.clone(),
            seq: 0,
            kind: ProblemKind::Mismatch,
            message: format!(
                "{} does not match a rebuild from the log: {} stored row(s) are not in the rebuild and {} rebuilt row(s) are not stored (first: {}); the facts, and every report built on them, were edited\n  help: `bursar report --db {} --rebuild` rebuilds them from the log",
                d.table,
                d.only_in_a,
                d.only_in_b,
                d.example,
                db.display()
            ),
        });
    }
    Ok(())
}

fn deep_compare(db: &Path, scratch: &Path, tables: &[&str]) -> Result<Vec<bursar_audit::derived::TableDiff>, CliError> {
    let report_err = |e: bursar_report::ReportError| CliError::Message(format!("verify --deep: {e}"));
    let stored = scratch.join("stored.db");
    let rebuilt = scratch.join("rebuilt.db");
    // Both sides from one copy of one instant (a live log moves between two copies).
    bursar_audit::derived::copy_to(db, &stored).map_err(audit_err)?;
    bursar_audit::derived::copy_to(&stored, &rebuilt).map_err(audit_err)?;
    let mut a = bursar_report::FactsStore::open(&stored, None).map_err(report_err)?;
    a.catch_up().map_err(report_err)?;
    drop(a);
    let mut b = bursar_report::FactsStore::open(&rebuilt, None).map_err(report_err)?;
    b.reset().map_err(report_err)?;
    b.catch_up().map_err(report_err)?;
    drop(b);
    bursar_audit::derived::compare_tables(&stored, &rebuilt, tables).map_err(audit_err)
}

/// Writes the answer of a query in `format`.
pub fn query(log: &AuditLog, filter: &Filter, format: QueryFormat, out: &mut dyn Write) -> Result<u64, CliError> {
    let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse::<usize>().ok()).unwrap_or(120).max(97);
    if format == QueryFormat::Csv {
        writeln!(out, "seq,time,decision,dry_run,job,project,user,policies,reason,until,gpus,gpu_hours,policy_set,decision_id,event_id")
            .map_err(|e| CliError::io("cannot write the answer", e))?;
    }
    if format == QueryFormat::Table {
        let head = format!(
            "{:>7}  {:<20}  {:<16}  {:<12}  {:<10}  {:<10}  POLICIES / REASON",
            "SEQ", "TIME", "DECISION", "JOB", "PROJECT", "USER"
        );
        writeln!(out, "{}", clip(&head, width)).map_err(|e| CliError::io("cannot write the answer", e))?;
    }
    let n = bursar_audit::query::query_each(log, filter, |d| match format {
        QueryFormat::Json => write_json(&d, out),
        QueryFormat::Csv => write_csv(&d, out),
        QueryFormat::Table => write_row(&d, width, out),
    })
    .map_err(|e| match e {
        AuditError::Output(io) => CliError::io("cannot write the answer", io),
        other => audit_err(other),
    })?;
    if format == QueryFormat::Table {
        writeln!(out, "({n} decision{})", if n == 1 { "" } else { "s" })
            .map_err(|e| CliError::io("cannot write the answer", e))?;
    }
    Ok(n)
}

fn write_json(d: &StoredDecision, out: &mut dyn Write) -> std::io::Result<()> {
    // The wire JSON, with the log's own fields put first; key order is kept.
    let json = d.wire_json().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    let rest = json.strip_prefix('{').unwrap_or(&json);
    let set = serde_json::to_string(&d.policy_set).unwrap_or_default();
    writeln!(out, "{{\"seq\":{},\"recorded_at\":\"{}\",\"policy_set\":{set},{rest}", d.seq, ts(d.recorded_at))
}

/// Which rows `bursar audit inventory` prints.
pub struct InventoryPick<'a> {
    /// Only this region.
    pub region: Option<&'a str>,
    /// Only this GPU type.
    pub gpu_type: Option<&'a str>,
}

/// `bursar audit inventory`: one line per row of every `pool.inventory` in `[since, until)`,
/// oldest first. Returns the rows printed.
pub fn inventory(
    log: &AuditLog,
    pick: &InventoryPick<'_>,
    since: Option<i64>,
    until: Option<i64>,
    format: QueryFormat,
    out: &mut dyn Write,
) -> Result<u64, CliError> {
    let write_err = |e| CliError::io("cannot write the answer", e);
    match format {
        QueryFormat::Csv => {
            writeln!(out, "time,region,gpu_type,queue,in_service,allocated,free,drained,source,event_id")
                .map_err(write_err)?
        }
        QueryFormat::Table => writeln!(
            out,
            "{:<20}  {:<12}  {:<10}  {:<10}  {:>10}  {:>9}  {:>6}  {:>7}  SOURCE",
            "TIME", "REGION", "GPU TYPE", "QUEUE", "IN SERVICE", "ALLOCATED", "FREE", "DRAINED"
        )
        .map_err(write_err)?,
        QueryFormat::Json => {}
    }
    let mut rows = 0u64;
    let mut unreadable = 0u64;
    log.each_event_of_type(bursar_model::input::INVENTORY_TYPE, since, until, |e| {
        // The log keeps the line as it came; one bursar accepted once reads back, so a line that does
        // not is counted and said, not fatal.
        let Ok(bursar_model::Input::Inventory(inv)) = bursar_model::decode_input(&e.raw) else {
            unreadable += 1;
            return Ok(());
        };
        let source = inv.source.as_deref().unwrap_or("");
        for r in &inv.capacity {
            if pick.region.is_some_and(|x| x != r.region) || pick.gpu_type.is_some_and(|x| x != r.gpu_type) {
                continue;
            }
            rows += 1;
            let line = match format {
                QueryFormat::Json => serde_json::json!({
                    "time": inv.time.to_string(), "region": r.region, "gpu_type": r.gpu_type, "queue": r.queue,
                    "in_service": r.in_service, "allocated": r.allocated, "free": r.free, "drained": r.drained,
                    "source": inv.source, "event_id": e.event_id,
                })
                .to_string(),
                QueryFormat::Csv => format!(
                    "{},{},{},{},{},{},{},{},{},{}",
                    inv.time,
                    csv_field(&r.region),
                    csv_field(&r.gpu_type),
                    csv_field(&r.queue),
                    r.in_service,
                    r.allocated,
                    r.free,
                    r.drained,
                    csv_field(source),
                    csv_field(&e.event_id)
                ),
                QueryFormat::Table => format!(
                    "{:<20}  {:<12}  {:<10}  {:<10}  {:>10}  {:>9}  {:>6}  {:>7}  {source}",
                    inv.time.to_string(),
                    r.region,
                    r.gpu_type,
                    if r.queue.is_empty() { "(any)" } else { &r.queue },
                    r.in_service,
                    r.allocated,
                    r.free,
                    r.drained
                ),
            };
            writeln!(out, "{line}").map_err(AuditError::Output)?;
        }
        Ok(())
    })
    .map_err(|e| match e {
        AuditError::Output(io) => CliError::io("cannot write the answer", io),
        other => audit_err(other),
    })?;
    if format == QueryFormat::Table {
        writeln!(out, "({rows} row{})", if rows == 1 { "" } else { "s" }).map_err(write_err)?;
    }
    if unreadable > 0 {
        eprintln!("bursar audit inventory: {unreadable} pool.inventory line(s) of the log could not be read back");
    }
    Ok(rows)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

fn write_csv(d: &StoredDecision, out: &mut dyn Write) -> std::io::Result<()> {
    let o = |v: &Option<String>| csv_field(v.as_deref().unwrap_or(""));
    writeln!(
        out,
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        d.seq,
        ts(d.time),
        d.decision,
        d.dry_run,
        o(&d.job),
        o(&d.project),
        o(&d.user),
        csv_field(&d.policies.join(";")),
        csv_field(&d.reason),
        d.until.map(ts).unwrap_or_default(),
        d.gpus.map(|g| g.to_string()).unwrap_or_default(),
        d.gpu_hours.map(|g| g.to_string()).unwrap_or_default(),
        csv_field(&d.policy_set),
        csv_field(&d.decision_id),
        csv_field(&d.event_id),
    )
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
    t.push('…');
    t
}

fn write_row(d: &StoredDecision, width: usize, out: &mut dyn Write) -> std::io::Result<()> {
    let kind = if d.dry_run { format!("{} (dry)", d.decision) } else { d.decision.clone() };
    let o = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let tail = format!("[{}] {}", d.policies.join(","), d.reason);
    let used = 7 + 2 + 20 + 2 + 16 + 2 + 12 + 2 + 10 + 2 + 10 + 2;
    writeln!(
        out,
        "{:>7}  {:<20}  {:<16}  {:<12}  {:<10}  {:<10}  {}",
        d.seq,
        ts(d.time),
        clip(&kind, 16),
        clip(&o(&d.job), 12),
        clip(&o(&d.project), 10),
        clip(&o(&d.user), 10),
        clip(&tail, width.saturating_sub(used).max(10))
    )
}

fn short(digest: &str) -> &str {
    &digest[..12.min(digest.len())]
}

/// Text from the log as a terminal may show it: a character that would move the cursor, change
/// colours, reorder the line or hide itself (a log written before names were bounded may hold one)
/// is written as its `\u{…}` escape.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| bursar_model::names::hidden(c).is_some()) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(
                |c| {
                    if bursar_model::names::hidden(c).is_some() {
                        c.escape_unicode().to_string()
                    } else {
                        c.to_string()
                    }
                },
            )
            .collect(),
    )
}

fn write_story(s: &Story, out: &mut dyn Write) -> std::io::Result<()> {
    // Unknown because its first events were pruned: say so, instead of a bare `?` (issue 45).
    let unknown = if s.pruned.is_some() { "unknown: pruned" } else { "?" };
    writeln!(
        out,
        "job {} (project {}, user {})",
        s.job,
        s.project.as_deref().unwrap_or(unknown),
        s.user.as_deref().unwrap_or(unknown)
    )?;
    if let Some((through, before)) = s.pruned {
        writeln!(
            out,
            "note: its submission is not in the log: the events before {} were pruned (through event seq {through}); what follows is what is left",
            Timestamp(before)
        )?;
    }
    let mut last_set: Option<&str> = None;
    for step in &s.steps {
        match step {
            Step::Event(e) => {
                writeln!(out, "{}  event {} {}", ts(e.time), shown(&e.event_id), e.kind)?;
                if let Some(sender) = e.sender() {
                    writeln!(out, "    from: {}", shown(&sender.describe()))?;
                }
                writeln!(out, "    {}", shown(&clip(&e.raw, 200)))?;
            }
            Step::Decision(d) => {
                if last_set != Some(d.policy_set.as_str()) {
                    writeln!(out, "    (policy set {} in force)", short(&d.policy_set))?;
                    last_set = Some(d.policy_set.as_str());
                }
                let until = d.until.map(|u| format!(" until {}", ts(u))).unwrap_or_default();
                let dry = if d.dry_run { " (dry-run: not enforced)" } else { "" };
                let cause = match d.event_seq {
                    Some(_) if d.event_id.is_empty() => String::new(),
                    Some(_) => format!(" on event {}", d.event_id),
                    None => format!(" on timer tick {}", d.event_id),
                };
                writeln!(out, "{}  decision #{} {}{until}{dry}{cause}", ts(d.time), d.seq, d.decision.to_uppercase())?;
                if !d.policies.is_empty() {
                    writeln!(out, "    policies: {}", d.policies.join(", "))?;
                }
                writeln!(out, "    reason: {}", shown(&d.reason))?;
            }
        }
    }
    for r in &s.refused {
        writeln!(out, "{}  refused {} {}", ts(r.time), shown(&r.event_id), r.kind)?;
        if let Some(sender) = r.sender.as_deref().and_then(|t| serde_json::from_str::<bursar_model::Sender>(t).ok()) {
            writeln!(out, "    from: {}", shown(&sender.describe()))?;
        }
        writeln!(out, "    why: {}", shown(r.reason.lines().next().unwrap_or_default()))?;
    }
    for set in &s.policy_sets {
        match set.first_loaded_at {
            Some(at) => {
                writeln!(
                    out,
                    "policy set {} first loaded {} from {} file(s):",
                    short(&set.digest),
                    ts(at),
                    set.files.len()
                )?;
                for f in &set.files {
                    writeln!(out, "    {} {}", short(&f.digest), f.path)?;
                }
            }
            None => writeln!(out, "policy set {} (not recorded in this log)", short(&set.digest))?,
        }
    }
    for l in s.loads.iter().filter(|l| !l.ok) {
        writeln!(
            out,
            "note: a policy reload failed at {} (the set in force stayed): {}",
            ts(l.at),
            l.error.as_deref().unwrap_or("?")
        )?;
    }
    Ok(())
}

fn write_stats(st: &bursar_audit::query::Stats, out: &mut dyn Write) -> std::io::Result<()> {
    let period = match (st.since, st.until) {
        (None, None) => "all time".to_owned(),
        (s, u) => {
            format!("{} to {}", s.map(ts).unwrap_or_else(|| "start".into()), u.map(ts).unwrap_or_else(|| "now".into()))
        }
    };
    writeln!(out, "{period}: {} events, {} decisions enforced, {} dry-run", st.events, st.decisions, st.dry_run)?;
    writeln!(out, "\nby decision:")?;
    for c in &st.by_kind {
        writeln!(out, "  {:<18} {:>10}  {:>12.1} GPU-h", c.key, c.count, c.gpu_hours)?;
    }
    writeln!(out, "\nby policy:")?;
    for c in &st.by_policy {
        writeln!(out, "  {:<40} {:<18} {:>10}  {:>12.1} GPU-h", c.key, c.decision, c.count, c.gpu_hours)?;
    }
    writeln!(out, "\nby project:")?;
    for c in &st.by_project {
        writeln!(out, "  {:<20} {:<18} {:>10}  {:>12.1} GPU-h", c.key, c.decision, c.count, c.gpu_hours)?;
    }
    let differ: u64 = st.dry_run_diffs.iter().filter(|d| d.differs).map(|d| d.count).sum();
    writeln!(out, "\ndry-run policies ({differ} decision(s) would have differed from what was enforced):")?;
    if st.dry_run_diffs.is_empty() {
        writeln!(out, "  none")?;
    }
    for d in &st.dry_run_diffs {
        writeln!(
            out,
            "  {:<40} would {:<16} where enforced {:<16} {:>8} times  {:>10.1} GPU-h{}",
            d.policy,
            d.would,
            d.enforced,
            d.count,
            d.gpu_hours,
            if d.differs { "" } else { "  (same)" }
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_times_parse() {
        assert_eq!(parse_when("2026-11-02").unwrap(), Timestamp::parse("2026-11-02T00:00:00Z").unwrap());
        assert!(parse_when("2026-13-02").is_err());
        assert!(parse_when("yesterday").is_err());
        assert_eq!(parse_kind("require_approval").unwrap(), "require_approval");
        assert!(parse_kind("maybe").is_err());
    }

    #[test]
    fn csv_quotes_only_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }
}
