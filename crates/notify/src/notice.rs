//! What becomes a notice, and what ends one: pure rules over the audit log's rows.
//!
//! A notice is raised by one decision (never a dry-run one):
//! - `require_approval` → an **approval** notice for each approver, with approve and reject links
//!   (approve over budget when a quota held the job), until the request lapses;
//! - an `alert` that an idle rule's deadline stands behind (the engine's [`JobFacts::idle`] names an
//!   alert at the decision's time) → an **idle** notice for the job's owner, with a keep-alive link,
//!   until the reclaim;
//! - a `reclaim` → a **reclaim** notice for the owner; any other `alert` → an **alert** notice (for
//!   the owner when it is about a job). These two only inform: they stay open `info_for` at most.
//!
//! It is resolved by what the log says next ([`Resolver`]): an approval by the job's next admission
//! decision (granted, rejected, lapsed); an idle notice by the idle rule's next decision about the
//! job (the keepalive's acknowledgement, a new alert) or a reclaim; every notice of a job by the
//! job's end (`finished` or `reclaimed` step). An acknowledgement that resolves an idle notice is
//! that notice's answer and raises no notice of its own.

use bursar_audit::{NewNotice, StoredDecision, StoredStep};
use bursar_engine::Step;
use bursar_model::api::{ActionKind, ApprovalWait, IdleWait, NoticeKind, NoticeLink, NoticeMessage, NoticeStatus};
use bursar_model::{Duration, Timestamp};

use crate::token::{Claims, LinkKey};

/// What the engine knows about a job now, as the notifier and the action links need it (built by
/// `bursar serve` on its engine thread).
#[derive(Debug, Clone, PartialEq)]
pub struct JobFacts {
    /// The job's phase (`running`, `pending_approval`, …).
    pub phase: String,
    /// Whether it holds or is about to hold GPUs.
    pub live: bool,
    /// Its user.
    pub user: String,
    /// Its project.
    pub project: String,
    /// The approval it waits for.
    pub approval: Option<ApprovalWait>,
    /// The idle rules' deadlines on it.
    pub idle: Vec<IdleWait>,
}

/// How links are made: the key and the base URL people reach serve at.
#[derive(Debug, Clone, Copy)]
pub struct Linker<'a> {
    /// The HMAC key.
    pub key: &'a LinkKey,
    /// `public_url`, without a trailing slash.
    pub base: &'a str,
}

impl Linker<'_> {
    /// A link as the outbox keeps it: its claims' parts and its token's hash, no URL.
    fn link(
        &self,
        action: ActionKind,
        job: &str,
        for_user: &str,
        expires: Timestamp,
        notice: &str,
        request: Option<(bursar_model::Gpus, f64, i64)>,
    ) -> NoticeLink {
        let claims = Claims {
            action,
            job: job.to_owned(),
            for_user: for_user.to_owned(),
            expires_ms: expires.millis(),
            notice: notice.to_owned(),
            request,
        };
        let token = self.key.sign(&claims);
        NoticeLink {
            action,
            for_user: for_user.to_owned(),
            url: String::new(),
            expires: expires.to_string(),
            token_sha256: crate::token::sha256_hex(token.as_bytes()),
            request,
        }
    }

    /// Fills the URL of every link of a notice about to be sent, signing its claims again (the
    /// signature is deterministic: the same claims give the same token). A resolved notice's links
    /// can no longer work, so they are dropped.
    pub fn fill(&self, m: &mut NoticeMessage) {
        if m.status == NoticeStatus::Resolved {
            m.links.clear();
            return;
        }
        let job = m.job_id.clone().unwrap_or_default();
        for l in &mut m.links {
            let Ok(expires) = Timestamp::parse(&l.expires) else { continue };
            let claims = Claims {
                action: l.action,
                job: job.clone(),
                for_user: l.for_user.clone(),
                expires_ms: expires.millis(),
                notice: m.id.clone(),
                request: l.request,
            };
            l.url = format!("{}/act/{}", self.base, self.key.sign(&claims));
        }
    }
}

/// The id of the notice raised by decision `seq`.
pub fn notice_id(seq: i64) -> String {
    format!("notice-{seq}")
}

fn parse_time(s: &str) -> Option<Timestamp> {
    Timestamp::parse(s).ok()
}

/// The notice decision `d` raises, if any, given what the engine knows about its job now.
pub fn raise(d: &StoredDecision, facts: Option<&JobFacts>, links: Linker<'_>, info_for: Duration) -> Option<NewNotice> {
    if d.dry_run {
        return None;
    }
    let id = notice_id(d.seq);
    let time = Timestamp(d.time);
    let job = d.job.as_deref();
    let who = d.user.clone().filter(|u| !u.is_empty());
    let mut msg = NoticeMessage {
        id: id.clone(),
        status: NoticeStatus::Firing,
        kind: NoticeKind::Alert,
        recipients: Vec::new(),
        job_id: d.job.clone(),
        project: d.project.clone(),
        user: who.clone(),
        policies: d.policies.clone(),
        decision: d.decision.clone(),
        decision_id: d.decision_id.clone(),
        summary: String::new(),
        reason: d.reason.clone(),
        starts_at: time.to_string(),
        deadline: None,
        resolved_at: None,
        resolution: None,
        links: Vec::new(),
    };
    let mut policy = None;
    let mut expires_at = None;
    let job_name = job.unwrap_or("?");
    match d.decision.as_str() {
        "require_approval" if d.admission => {
            msg.kind = NoticeKind::Approval;
            let wait = facts.and_then(|f| f.approval.as_ref());
            if let Some(w) = wait {
                let expires = parse_time(&w.expires).unwrap_or(time);
                msg.deadline = Some(w.expires.clone());
                msg.recipients = w.approvers.clone();
                let approve = if w.over_budget { ActionKind::ApproveOverBudget } else { ActionKind::Approve };
                for a in &w.approvers {
                    let request = parse_time(&w.submitted).map(|t| (w.gpus, w.requested_hours, t.millis()));
                    msg.links.push(links.link(approve, job_name, a, expires, &id, request));
                    msg.links.push(links.link(ActionKind::Reject, job_name, a, expires, &id, request));
                }
            }
            let by = match wait.map(|w| w.approvers.as_slice()) {
                Some([]) | None => "any approver".to_owned(),
                Some(list) => list.join(" or "),
            };
            msg.summary = format!(
                "job {job_name} of {} waits for approval by {by}{}",
                d.project.as_deref().unwrap_or("?"),
                msg.deadline.as_deref().map(|e| format!(" until {e}")).unwrap_or_default()
            );
        }
        "alert" => {
            let idle = facts.and_then(|f| {
                f.idle.iter().find(|w| {
                    d.policies.contains(&w.policy) && parse_time(&w.alerted).map(|t| t.millis()) == Some(d.time)
                })
            });
            match (idle, job) {
                (Some(w), Some(job)) => {
                    msg.kind = NoticeKind::Idle;
                    policy = Some(w.policy.clone());
                    msg.deadline = Some(w.reclaim_at.clone());
                    msg.recipients = vec![w.user.clone()];
                    let at = parse_time(&w.reclaim_at).unwrap_or(time);
                    msg.links.push(links.link(ActionKind::Keepalive, job, &w.user, at, &id, None));
                    msg.summary = format!(
                        "job {job} of {} is idle on {} GPUs: reclaimed at {} unless kept alive",
                        w.project, w.gpus, w.reclaim_at
                    );
                }
                _ => {
                    msg.recipients = who.into_iter().collect();
                    policy = d.policies.first().cloned();
                    expires_at = Some(time.plus(info_for).millis());
                    msg.summary = match job {
                        Some(j) => format!("bursar alert about job {j}"),
                        None => "bursar alert".to_owned(),
                    };
                }
            }
        }
        "reclaim" => {
            msg.kind = NoticeKind::Reclaim;
            msg.recipients = who.into_iter().collect();
            expires_at = Some(time.plus(info_for).millis());
            msg.summary = format!("job {job_name}'s GPUs are reclaimed");
        }
        _ => return None,
    }
    Some(NewNotice {
        seq: d.seq,
        job: d.job.clone(),
        kind: msg.kind.as_str().to_owned(),
        policy,
        opened_at: d.time,
        expires_at,
        body: serde_json::to_string(&msg).unwrap_or_default(),
    })
}

/// An open notice, as the resolution rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// Its decision seq.
    pub seq: i64,
    /// The job.
    pub job: Option<String>,
    /// Its kind.
    pub kind: NoticeKind,
    /// The policy whose next decision about the job resolves it (idle notices).
    pub policy: Option<String>,
    /// Event time it was raised, ms (for an idle notice: when the idle rule alerted).
    pub opened_at: i64,
}

/// A notice the log just resolved: its seq, when and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The notice.
    pub seq: i64,
    /// Event time, ms.
    pub at: i64,
    /// How, for people.
    pub how: String,
}

/// The open notices and the rules that close them, applied to the log in order.
#[derive(Debug, Default)]
pub struct Resolver {
    open: Vec<Open>,
}

impl Resolver {
    /// Starts from the notices open in the outbox.
    pub fn new(open: Vec<Open>) -> Resolver {
        Resolver { open }
    }

    /// The notices still open.
    pub fn open(&self) -> &[Open] {
        &self.open
    }

    /// A notice raised in this pass.
    pub fn opened(&mut self, o: Open) {
        self.open.push(o);
    }

    fn close(&mut self, mut matches: impl FnMut(&Open) -> bool, at: i64, how: &str, out: &mut Vec<Resolution>) {
        self.open.retain(|o| {
            if matches(o) {
                out.push(Resolution { seq: o.seq, at, how: how.to_owned() });
                false
            } else {
                true
            }
        });
    }

    /// Decision `d` (read after every notice now open): returns whether it answered an idle notice
    /// (then it raises none of its own).
    pub fn decision(&mut self, d: &StoredDecision, out: &mut Vec<Resolution>) -> bool {
        if d.dry_run {
            return false;
        }
        let Some(job) = d.job.as_deref() else { return false };
        let before = out.len();
        let same_job = |o: &Open| o.job.as_deref() == Some(job) && o.seq < d.seq;
        if d.admission && (d.decision == "allow" || d.decision == "deny") {
            let how = if d.decision == "allow" { "approved" } else { "refused" };
            self.close(|o| same_job(o) && o.kind == NoticeKind::Approval, d.time, &format!("{how}: {}", d.reason), out);
        }
        let reclaim = d.decision == "reclaim";
        let answered = |o: &Open| {
            same_job(o)
                && o.kind == NoticeKind::Idle
                && (reclaim || o.policy.as_ref().is_some_and(|p| d.policies.iter().any(|q| q == p)))
        };
        let how = if reclaim { format!("reclaimed: {}", d.reason) } else { d.reason.clone() };
        self.close(answered, d.time, &how, out);
        // Only an alert that closed an idle notice is its answer (a reclaim is a notice of its own).
        out.len() > before && d.decision == "alert"
    }

    /// Job step `s`: the job's end closes every notice about it; its reclaim every notice but the
    /// reclaim's own (which tells the owner, until the job ends or its time is up).
    pub fn step(&mut self, s: &StoredStep, out: &mut Vec<Resolution>) {
        let job = Some(s.job.as_str());
        match s.step {
            Step::Finished(status) => {
                let how = format!("job {} {}", s.job, status.as_str());
                self.close(|o| o.job.as_deref() == job, s.time, &how, out);
            }
            Step::Reclaimed => {
                let how = format!("job {} reclaimed", s.job);
                self.close(|o| o.job.as_deref() == job && o.kind != NoticeKind::Reclaim, s.time, &how, out);
            }
            _ => {}
        }
    }

    /// Closes the notices that only inform once `now` (ms) passes their expiry.
    pub fn expire(&mut self, expiring: &[(i64, i64)], now: i64, out: &mut Vec<Resolution>) {
        for &(seq, at) in expiring {
            if at <= now {
                self.close(|o| o.seq == seq, at, "informational notice: shown for its time", out);
            }
        }
    }

    /// Closes the idle notices whose deadline the engine no longer holds (the job's utilisation
    /// rose again, which ends the idle window without a decision).
    pub fn no_longer_idle(&mut self, still: impl Fn(&Open) -> bool, now: i64, out: &mut Vec<Resolution>) {
        self.close(|o| o.kind == NoticeKind::Idle && !still(o), now, "the job is busy again", out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::FinishStatus;

    fn decision(seq: i64, kind: &str, policies: &[&str], time: i64) -> StoredDecision {
        StoredDecision {
            seq,
            decision_id: format!("e{seq}/0"),
            event_id: format!("e{seq}"),
            event_seq: Some(seq),
            time,
            recorded_at: 0,
            job: Some("j1".into()),
            project: Some("nlp".into()),
            user: Some("alice".into()),
            decision: kind.into(),
            dry_run: false,
            admission: kind == "require_approval",
            policies: policies.iter().map(|p| p.to_string()).collect(),
            reason: format!("{kind} reason"),
            until: None,
            gpus: Some(8.into()),
            gpu_hours: None,
            policy_set: "d".into(),
            stored_json: String::new(),
        }
    }

    fn facts(idle_at: Option<i64>) -> JobFacts {
        JobFacts {
            phase: "running".into(),
            live: true,
            user: "alice".into(),
            project: "nlp".into(),
            approval: Some(ApprovalWait {
                job_id: "j1".into(),
                project: "nlp".into(),
                user: "alice".into(),
                gpus: 8.into(),
                requested_hours: 100.0,
                submitted: Timestamp(0).to_string(),
                expires: Timestamp(86_400_000).to_string(),
                approvers: vec!["bob".into(), "carol".into()],
                policies: vec!["approval/big".into()],
                reason: "big".into(),
                over_budget: true,
                held_by: vec!["over budget".into()],
                self_approval: false,
            }),
            idle: idle_at
                .map(|t| IdleWait {
                    job_id: "j1".into(),
                    project: "nlp".into(),
                    user: "alice".into(),
                    gpus: 8.into(),
                    alerted: Timestamp(t).to_string(),
                    reclaim_at: Timestamp(t + 60_000).to_string(),
                    policy: "reclaim/idle".into(),
                    idle_since: None,
                    gpu_util: None,
                    mem_util: None,
                    last_sample: None,
                    no_sample: None,
                })
                .into_iter()
                .collect(),
        }
    }

    fn body(n: &NewNotice) -> NoticeMessage {
        serde_json::from_str(&n.body).unwrap()
    }

    #[test]
    fn decisions_raise_the_notices_people_act_on() {
        let key = LinkKey::from_bytes([1; 32]);
        let links = Linker { key: &key, base: "http://b" };
        let info = Duration::hours(1);
        let approval =
            raise(&decision(3, "require_approval", &["approval/big"], 1000), Some(&facts(None)), links, info).unwrap();
        let m = body(&approval);
        assert_eq!((m.kind, m.recipients.clone()), (NoticeKind::Approval, vec!["bob".to_owned(), "carol".to_owned()]));
        let actions: Vec<(ActionKind, &str)> = m.links.iter().map(|l| (l.action, l.for_user.as_str())).collect();
        assert_eq!(
            actions,
            [
                (ActionKind::ApproveOverBudget, "bob"),
                (ActionKind::Reject, "bob"),
                (ActionKind::ApproveOverBudget, "carol"),
                (ActionKind::Reject, "carol")
            ]
        );
        // The outbox keeps no URL, only the token's hash; the link is signed again when it is sent,
        // to the same token.
        assert!(m.links.iter().all(|l| l.url.is_empty() && l.token_sha256.len() == 64), "{:?}", m.links);
        let mut sent = m.clone();
        links.fill(&mut sent);
        let token = sent.links[0].url.strip_prefix("http://b/act/").unwrap();
        assert_eq!(crate::token::sha256_hex(token.as_bytes()), m.links[0].token_sha256);
        let claims = key.verify(token, Timestamp(0)).unwrap();
        assert_eq!((claims.job.as_str(), claims.for_user.as_str(), claims.notice.as_str()), ("j1", "bob", "notice-3"));
        assert!(claims.request.is_some(), "an approval link is bound to its request");
        let body_text = serde_json::to_string(&m).unwrap();
        assert!(!body_text.contains("/act/"), "the stored notice holds a link: {body_text}");
        assert_eq!(approval.expires_at, None);

        // An alert at the time the idle rule alerted: an idle notice with a keep-alive link.
        let idle =
            raise(&decision(5, "alert", &["reclaim/idle"], 5000), Some(&facts(Some(5000))), links, info).unwrap();
        let m = body(&idle);
        assert_eq!((m.kind, idle.policy.as_deref()), (NoticeKind::Idle, Some("reclaim/idle")));
        assert_eq!(m.links.len(), 1);
        assert_eq!(m.deadline, Some(Timestamp(65_000).to_string()));
        // The same alert once the engine has moved on (another alert time): a plain alert.
        let plain =
            raise(&decision(5, "alert", &["reclaim/idle"], 5000), Some(&facts(Some(9000))), links, info).unwrap();
        assert_eq!((body(&plain).kind, plain.expires_at), (NoticeKind::Alert, Some(5000 + 3_600_000)));
        assert_eq!(
            body(&raise(&decision(6, "reclaim", &["reclaim/idle"], 6000), None, links, info).unwrap()).kind,
            NoticeKind::Reclaim
        );
        // Nothing for allows, denies, defers and dry runs.
        for kind in ["allow", "deny", "defer"] {
            assert!(raise(&decision(7, kind, &[], 7000), None, links, info).is_none());
        }
        let mut dry = decision(8, "alert", &["x"], 8000);
        dry.dry_run = true;
        assert!(raise(&dry, None, links, info).is_none());
    }

    #[test]
    fn the_log_resolves_what_it_raised() {
        let open = |seq, kind, policy: Option<&str>| Open {
            seq,
            job: Some("j1".into()),
            kind,
            policy: policy.map(str::to_owned),
            opened_at: seq * 1000,
        };
        let mut r =
            Resolver::new(vec![open(3, NoticeKind::Approval, None), open(5, NoticeKind::Idle, Some("reclaim/idle"))]);
        let mut out = Vec::new();
        // Another policy's alert leaves the idle notice open and is no answer.
        assert!(!r.decision(&decision(6, "alert", &["efficiency/x"], 6000), &mut out));
        assert!(out.is_empty());
        // The idle rule's acknowledgement of a keepalive closes it and is its answer.
        assert!(r.decision(&decision(7, "alert", &["reclaim/idle"], 7000), &mut out));
        assert_eq!(out.iter().map(|o| o.seq).collect::<Vec<_>>(), [5]);
        // The admission after the hold closes the approval.
        let mut granted = decision(8, "allow", &["approval/big"], 8000);
        granted.admission = true;
        assert!(!r.decision(&granted, &mut out));
        assert!(out[1].how.starts_with("approved"));
        assert!(r.open().is_empty());
        // A reclaim step leaves the reclaim's own notice open; the job's end closes whatever is left.
        r.opened(open(9, NoticeKind::Reclaim, None));
        r.step(&StoredStep { event_seq: 10, job: "j1".into(), step: Step::Started, time: 1 }, &mut out);
        r.step(&StoredStep { event_seq: 10, job: "j1".into(), step: Step::Reclaimed, time: 1 }, &mut out);
        assert_eq!(out.len(), 2);
        r.step(
            &StoredStep {
                event_seq: 11,
                job: "j1".into(),
                step: Step::Finished(FinishStatus::Cancelled),
                time: 11_000,
            },
            &mut out,
        );
        assert_eq!((out[2].seq, out[2].how.as_str()), (9, "job j1 cancelled"));
    }
}
