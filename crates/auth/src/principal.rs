//! Principals and callers: who a request comes from, what they may do, and for which jobs.

use std::sync::Arc;

use bursar_model::{EventKind, Input, Sender};

use crate::budget::Budget;
use crate::role::{Power, Role, Roles};

/// The separator between a sender's namespace and its own id in the event ids bursar keeps
/// (`<principal>:<id>`, `~<person>:<id>`): no principal's or person's name may hold it.
pub const ID_SEPARATOR: char = ':';

/// What a person's namespace begins with (`~alice:e1`): no principal's name may begin with it.
pub const PERSON_MARK: char = '~';

/// A name a server knows, with its roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The name (`slurmctld`, `bob`): what the audit log records, what policies' `approvers` name.
    pub name: Arc<str>,
    /// What it may do.
    pub roles: Roles,
    /// The job ids it may speak for (`*` patterns); empty: every job.
    pub jobs: Vec<String>,
    /// A service principal declared in `[[principal]]`, reached only through its tokens,
    /// `cert_subjects` or `unix_users`; `false`: a person, named by a credential (JWT, MUNGE, a
    /// proxy's header, a certificate's common name, a socket peer) and given the `[auth] people`
    /// roles or those of a `[[person]]` table. The two are separate namespaces: a person named like
    /// a principal never gets its powers.
    pub declared: bool,
    /// Its roles were given to its name: a `[[principal]]`, or a `[[person]]` table (not the
    /// `[auth] people` roles every person a credential names gets). Only such an approver, or an
    /// admin, answers the request of a policy that names no `approvers` (issue 56).
    pub named: bool,
    /// How much it may write per minute.
    pub budget: Budget,
}

/// A `*` pattern match (`lab-*`, `*-gpu`, `*`).
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else { return true };
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for m in middle {
        match rest.find(m) {
            Some(i) => rest = &rest[i + m.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl Principal {
    /// Whether it may speak for job `job`: its `jobs` patterns match (or it has none).
    pub fn speaks_for(&self, job: &str) -> bool {
        self.jobs.is_empty() || self.jobs.iter().any(|p| glob(p, job))
    }
}

/// How a caller's credential proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// No principals are configured: a loopback server without authentication.
    Open,
    /// A bearer token of the configuration (its hash's first digits).
    Token {
        /// The label of its hash.
        label: String,
    },
    /// A JSON Web Token.
    Jwt {
        /// `HS256` or `RS256`.
        alg: &'static str,
        /// The key id (RS256), if the token named one.
        kid: Option<String>,
        /// Its `exp`, seconds since the epoch.
        expires: i64,
    },
    /// A MUNGE credential, decoded by `munged`.
    Munge {
        /// The UID it was encoded by.
        uid: u32,
        /// The SHA-256 (hex) of the body the credential was made for: the method and path are
        /// checked with the credential, the body once it is read ([`Caller::check_body`]), so a
        /// request whose credential fails is refused before its body is read.
        body_sha256: String,
    },
    /// A TLS client certificate.
    Cert {
        /// Its subject.
        subject: String,
    },
    /// A trusted reverse proxy's user header.
    Proxy {
        /// The proxy's address.
        from: String,
    },
    /// The event socket's peer credentials (`SO_PEERCRED`).
    Unix {
        /// The peer's UID.
        uid: u32,
    },
    /// A signed action link, addressed to this principal.
    Link {
        /// The notice it came with.
        notice: String,
    },
}

impl Proof {
    /// The method's name, as the audit log keeps it.
    pub fn via(&self) -> &'static str {
        match self {
            Proof::Open => "open",
            Proof::Token { .. } => "token",
            Proof::Jwt { .. } => "jwt",
            Proof::Munge { .. } => "munge",
            Proof::Cert { .. } => "cert",
            Proof::Proxy { .. } => "proxy",
            Proof::Unix { .. } => "unix",
            Proof::Link { .. } => "link",
        }
    }

    /// What it said, for the record.
    pub fn detail(&self) -> Option<String> {
        match self {
            Proof::Open => None,
            Proof::Token { label } => Some(format!("sha256:{label}…")),
            Proof::Jwt { alg, kid, expires } => Some(match kid {
                Some(k) => format!("{alg} key {k}, expires {}", bursar_model::Timestamp(expires.saturating_mul(1000))),
                None => format!("{alg}, expires {}", bursar_model::Timestamp(expires.saturating_mul(1000))),
            }),
            Proof::Munge { uid, .. } => Some(format!("uid {uid}")),
            Proof::Cert { subject } => Some(subject.clone()),
            Proof::Proxy { from } => Some(format!("via proxy {from}")),
            Proof::Unix { uid } => Some(format!("uid {uid}")),
            Proof::Link { notice } => Some(notice.clone()),
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who.
    pub principal: Arc<Principal>,
    /// How they proved it.
    pub proof: Proof,
}

/// A valid credential without the power: 403, naming the power and the principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denied {
    /// The power that was needed.
    pub power: Power,
    /// The sentence for the caller.
    pub message: String,
}

impl Caller {
    /// The caller every request of a server without principals is: every role.
    pub fn open() -> Caller {
        Caller {
            principal: Arc::new(Principal {
                name: Arc::from("anonymous"),
                roles: Roles::all(),
                jobs: Vec::new(),
                declared: false,
                named: false,
                budget: Budget::PRINCIPAL,
            }),
            proof: Proof::Open,
        }
    }

    /// Ok unless the credential was made for another body (a MUNGE credential binds the SHA-256
    /// of the body it was made for): the 401's error. Every other proof says nothing of the body.
    pub fn check_body(&self, body: &[u8]) -> Result<(), crate::MungeError> {
        match &self.proof {
            Proof::Munge { body_sha256, .. } if *body_sha256 != crate::munge::body_digest(body) => {
                Err(crate::MungeError::WrongRequest)
            }
            _ => Ok(()),
        }
    }

    /// Whether a body must be read to authenticate this caller ([`Caller::check_body`]).
    pub fn binds_body(&self) -> bool {
        matches!(self.proof, Proof::Munge { .. })
    }

    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.principal.name
    }

    /// The namespace of the event ids this caller sends: a declared principal's ids are kept as
    /// `<name>:<id>` (what the agents read back), a person's as `~<name>:<id>`. People and principals
    /// are separate namespaces for ids as for powers: a person named like a principal (a local user
    /// `agents`) cannot send the principal's next id and have its real event dropped as a duplicate
    /// (issue 56). Neither kind of name may hold the separator, and no principal's begins with
    /// [`PERSON_MARK`], so a kept id names its sender unambiguously. `None` without principals
    /// (ids are kept as sent).
    pub fn id_namespace(&self) -> Option<String> {
        if self.is_open() {
            None
        } else if self.principal.declared {
            Some(self.principal.name.to_string())
        } else {
            Some(format!("{PERSON_MARK}{}", self.principal.name))
        }
    }

    /// Whether this caller may answer the request of a policy that names no `approvers`: an
    /// approver or an admin whose roles were given to its name (a `[[principal]]` or a `[[person]]`
    /// table), not a person with the `[auth] people` roles every local user gets.
    pub fn answers_unnamed(&self) -> bool {
        self.is_open()
            || (self.principal.named
                && (self.principal.roles.has(Role::Approver) || self.principal.roles.has(Role::Admin)))
    }

    /// Whether the server has no principals (every caller is [`Caller::open`]).
    pub fn is_open(&self) -> bool {
        self.proof == Proof::Open
    }

    /// What the journal keeps of this caller.
    pub fn sender(&self) -> Sender {
        Sender {
            principal: self.principal.name.to_string(),
            via: self.proof.via().to_owned(),
            detail: self.proof.detail(),
        }
    }

    /// Ok when one of the caller's roles grants `power`; else the 403 that says which roles would.
    pub fn may(&self, power: Power) -> Result<(), Denied> {
        if self.principal.roles.grant(power) {
            return Ok(());
        }
        let roles: Vec<&str> = power.granted_by().into_iter().map(Role::as_str).collect();
        Err(Denied {
            power,
            message: format!(
                "`{}` ({}) lacks the `{power}` power: it needs the role {}",
                self.principal.name,
                self.principal.roles.names(),
                roles.join(" or ")
            ),
        })
    }

    fn for_job(&self, power: Power, job: &str) -> Result<(), Denied> {
        self.may(power)?;
        if self.principal.speaks_for(job) {
            return Ok(());
        }
        Err(Denied {
            power,
            message: format!(
                "`{}` may not speak for job `{job}`: its jobs are {}",
                self.principal.name,
                self.principal.jobs.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
            ),
        })
    }

    fn by_self(&self, by: Option<&str>, what: &str) -> Result<(), Denied> {
        if self.is_open() {
            return Ok(());
        }
        match by {
            Some(b) if b == &*self.principal.name => Ok(()),
            Some(b) => Err(Denied {
                power: Power::Answer,
                message: format!(
                    "`by` is `{b}` but the credential is `{}`'s: {what} is recorded as whoever sends it; send it as `{b}`, or leave `by` out of the request's intent and let bursar fill it",
                    self.principal.name
                ),
            }),
            None => Err(Denied {
                power: Power::Answer,
                message: format!("{what} must say who answers: `\"by\": \"{}\"`", self.principal.name),
            }),
        }
    }

    /// Checks what the caller may send, before anything reaches the engine: the power the input's
    /// type needs, the jobs the caller may speak for, and that an answer or keepalive is sent by the
    /// one it names. What needs the engine's state (is this caller among the job's approvers, is it
    /// the job's own user) is checked on the engine thread ([`KeepaliveScope`]).
    pub fn check_input(&self, input: &Input) -> Result<(), Denied> {
        match input {
            Input::Event(e) => {
                if !self.is_open() && e.extra.iter().any(|(k, _)| k == "via") {
                    return Err(Denied {
                        power: Power::Report,
                        message:
                            "`via` is recorded by bursar from the credential, not taken from the event; leave it out"
                                .to_owned(),
                    });
                }
                match &e.kind {
                    EventKind::JobSubmitted(j) => self.for_job(Power::Submit, &j.id),
                    EventKind::JobStarted { job_id, info } => {
                        // A task's start creates it from its array: the caller must report for both.
                        if let Some(parent) = &info.parent {
                            self.for_job(Power::Report, parent)?;
                        }
                        self.for_job(Power::Report, job_id)
                    }
                    EventKind::JobFinished { job_id, .. }
                    | EventKind::JobQueued { job_id }
                    | EventKind::JobRequeued { job_id }
                    | EventKind::JobSample(bursar_model::Sample { job_id, .. }) => self.for_job(Power::Report, job_id),
                    EventKind::JobKeepalive { job_id, by } => {
                        // A producer's jobs are its patterns': checked here, before the engine
                        // looks the job up, so one outside them learns nothing of whether the job
                        // exists (a 404 for an unknown job beside a 403 for a known one told it).
                        if self.keepalive_scope() == KeepaliveScope::JobsItSpeaksFor {
                            self.for_job(Power::Keepalive, job_id)?;
                        } else {
                            self.may(Power::Keepalive)?;
                        }
                        self.by_self(by.as_deref(), "a keepalive")
                    }
                    EventKind::BillingCharge(c) => match &c.job_id {
                        Some(j) => self.for_job(Power::Bill, j),
                        None => self.may(Power::Bill),
                    },
                    EventKind::ApprovalGranted { by, .. } | EventKind::ApprovalRejected { by, .. } => {
                        self.may(Power::Answer)?;
                        self.by_self(by.as_deref(), "an answer")
                    }
                    EventKind::AssetRegistered { .. } | EventKind::ClockTick => self.may(Power::Report),
                }
            }
            Input::Action(a) => match &a.job_id {
                Some(j) => self.for_job(Power::Report, j),
                None => self.may(Power::Report),
            },
            // What the pool has, as an agent reads it from the scheduler.
            Input::Inventory(_) => self.may(Power::Report),
            // The decoder refuses these from every caller; nobody has the power.
            Input::WallTick(_) | Input::Run(_) | Input::Ledger(_) => Err(Denied {
                power: Power::Report,
                message: format!("`{}` is written by bursar itself", input.type_name()),
            }),
        }
    }

    /// Which jobs the caller may keep alive, for the engine thread's check.
    pub fn keepalive_scope(&self) -> KeepaliveScope {
        if self.principal.roles.has(Role::Producer) || self.is_open() {
            KeepaliveScope::JobsItSpeaksFor
        } else {
            KeepaliveScope::OwnJobs
        }
    }

    /// Whether the caller may keep alive job `job` of user `user` (what [`Caller::check_input`] could
    /// not see).
    pub fn may_keep_alive(&self, job: &str, user: &str) -> Result<(), Denied> {
        self.may(Power::Keepalive)?;
        match self.keepalive_scope() {
            KeepaliveScope::JobsItSpeaksFor if self.principal.speaks_for(job) => Ok(()),
            KeepaliveScope::OwnJobs if user == &*self.principal.name => Ok(()),
            _ => Err(Denied {
                power: Power::Keepalive,
                message: format!(
                    "`{}` may not keep job `{job}` alive: it is `{user}`'s (a person keeps only their own jobs alive)",
                    self.principal.name
                ),
            }),
        }
    }
}

/// Which jobs a caller may keep alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepaliveScope {
    /// A producer: the jobs its `jobs` patterns name.
    JobsItSpeaksFor,
    /// A person: the jobs whose user they are.
    OwnJobs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::decode_input;

    fn caller(name: &str, roles: &[Role], jobs: &[&str]) -> Caller {
        Caller {
            principal: Arc::new(Principal {
                name: Arc::from(name),
                roles: roles.iter().copied().collect(),
                jobs: jobs.iter().map(|s| (*s).to_owned()).collect(),
                declared: true,
                named: true,
                budget: Budget::PRINCIPAL,
            }),
            proof: Proof::Token { label: "abcd1234".into() },
        }
    }

    #[test]
    fn globs() {
        assert!(glob("*", "x") && glob("lab-*", "lab-17") && !glob("lab-*", "lob-17"));
        assert!(glob("*-gpu", "a-gpu") && !glob("*-gpu", "a-cpu") && glob("a*b*c", "aXbYc") && !glob("a*b*c", "aXc"));
        assert!(glob("exact", "exact") && !glob("exact", "exactly"));
    }

    #[test]
    fn each_input_needs_its_power_and_its_job() {
        let sub = decode_input(r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"lab-1","project":"nlp","gpus":1,"requested_hours":1}}"#).unwrap();
        let fin = decode_input(
            r#"{"id":"e2","time":"2026-11-02T09:00:00Z","type":"job.finished","job_id":"k8s-1","status":"succeeded"}"#,
        )
        .unwrap();
        let grant = decode_input(
            r#"{"id":"e3","time":"2026-11-02T09:00:00Z","type":"approval.granted","job_id":"lab-1","by":"bob"}"#,
        )
        .unwrap();
        let scheduler = caller("slurmctld", &[Role::Scheduler], &["lab-*"]);
        assert_eq!(scheduler.check_input(&sub), Ok(()));
        let e = scheduler.check_input(&fin).unwrap_err();
        assert_eq!(e.power, Power::Report);
        assert!(e.message.contains("`slurmctld` (scheduler) lacks the `report` power"), "{}", e.message);
        let watch = caller("slurm-watch", &[Role::Producer], &["lab-*"]);
        assert!(watch.check_input(&fin).unwrap_err().message.contains("may not speak for job `k8s-1`"));
        assert!(watch.check_input(&sub).is_err(), "a producer cannot submit");
        let bob = caller("bob", &[Role::Approver], &[]);
        assert_eq!(bob.check_input(&grant), Ok(()));
        let mallory = caller("mallory", &[Role::Approver], &[]);
        assert!(mallory.check_input(&grant).unwrap_err().message.contains("`by` is `bob`"));
        let via = decode_input(r#"{"id":"e4","time":"2026-11-02T09:00:00Z","type":"approval.granted","job_id":"lab-1","by":"bob","via":"link"}"#).unwrap();
        assert!(bob.check_input(&via).unwrap_err().message.contains("`via`"));
        assert_eq!(Caller::open().check_input(&via), Ok(()));
    }

    #[test]
    fn keepalives_are_for_a_producers_jobs_or_ones_own() {
        let alice = caller("alice", &[Role::User], &[]);
        assert_eq!(alice.may_keep_alive("lab-1", "alice"), Ok(()));
        assert!(alice.may_keep_alive("lab-2", "bob").unwrap_err().message.contains("`bob`'s"));
        let watch = caller("slurm-watch", &[Role::Producer], &["lab-*"]);
        assert_eq!(watch.may_keep_alive("lab-2", "bob"), Ok(()));
        assert!(watch.may_keep_alive("k8s-2", "bob").is_err());
    }

    #[test]
    fn the_sender_says_how_it_was_proved() {
        let c = Caller {
            proof: Proof::Munge { uid: 1001, body_sha256: crate::munge::body_digest(b"{}") },
            ..caller("bob", &[Role::Approver], &[])
        };
        assert!(c.check_body(b"{}").is_ok() && c.check_body(b"{\"x\":1}").is_err());
        assert_eq!(c.sender().describe(), "bob (munge: uid 1001)");
    }
}
