//! The two sinks, as bodies built from types and one POST each.
//!
//! - **Alertmanager** (`POST /api/v2/alerts`, a JSON array of postable alerts, Alertmanager 0.25's
//!   OpenAPI `postableAlerts`): one alert per recipient of a notice, so a route can send each
//!   approver their own links. Labels: `alertname` (`BursarApprovalRequired`, `BursarJobIdle`,
//!   `BursarJobReclaimed`, `BursarAlert`), `project`, `user`, `bursar_job`, `policy`, `decision`,
//!   `recipient`, `severity`. Annotations: `summary`, `reason`, `deadline`, `notice`,
//!   `decision_id`, `resolution`, and one `<action>_url` per link for that recipient
//!   (`keepalive_url`, `approve_url`, `approve_over_budget_url`, `reject_url`). A firing alert's
//!   `endsAt` is four re-send intervals ahead (the notifier re-sends it every interval while open,
//!   as Prometheus does, so a bursar that stopped lets its alerts lapse rather than fire forever); a
//!   resolved one's is when its cause ended, which Alertmanager shows as resolved.
//! - **Webhook**: one [`NoticeMessage`] per request, firing once and resolved once, with an
//!   `Idempotency-Key` header (`notice-<seq>-firing` / `-resolved`).

use std::collections::BTreeMap;

use bursar_model::Timestamp;
use bursar_model::api::{NoticeKind, NoticeMessage, NoticeStatus};
use serde::Serialize;

/// One alert of Alertmanager's v2 API (`postableAlert`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostableAlert {
    /// Identity and routing.
    pub labels: BTreeMap<String, String>,
    /// Everything else.
    pub annotations: BTreeMap<String, String>,
    /// When the cause began.
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// When it ends (or lapses unless re-sent).
    #[serde(rename = "endsAt")]
    pub ends_at: String,
    /// Where to look: serve's pool page.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
}

fn alertname(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Approval => "BursarApprovalRequired",
        NoticeKind::Idle => "BursarJobIdle",
        NoticeKind::Reclaim => "BursarJobReclaimed",
        NoticeKind::Alert => "BursarAlert",
    }
}

/// For a firing approval or idle notice whose recipient has no link (links are off, or none could be
/// made): the command that answers it.
pub fn answer_without_links(m: &NoticeMessage, recipient: &str) -> Option<String> {
    if m.status == NoticeStatus::Resolved || m.links.iter().any(|l| l.for_user == recipient) {
        return None;
    }
    let job = m.job_id.as_deref().filter(|j| !j.is_empty())?;
    match m.kind {
        NoticeKind::Approval => Some(format!("bursar approve {job}  (or: bursar reject {job} --reason …)")),
        NoticeKind::Idle => Some(format!("bursar keepalive {job}")),
        NoticeKind::Reclaim | NoticeKind::Alert => None,
    }
}

/// The Alertmanager alerts of notice `m` at wall time `now`: firing until `now + lease`, or resolved.
pub fn alerts(m: &NoticeMessage, now: Timestamp, lease: bursar_model::Duration, base_url: &str) -> Vec<PostableAlert> {
    let starts = Timestamp::parse(&m.starts_at).map_or(now, |t| t.min(now));
    let ends = match (m.status, m.resolved_at.as_deref().and_then(|t| Timestamp::parse(t).ok())) {
        (NoticeStatus::Resolved, Some(t)) => t.min(now).max(starts),
        (NoticeStatus::Resolved, None) => now.max(starts),
        (NoticeStatus::Firing, _) => now.plus(lease),
    };
    let severity = match m.kind {
        NoticeKind::Approval | NoticeKind::Idle => "warning",
        NoticeKind::Reclaim | NoticeKind::Alert => "info",
    };
    let mut base = BTreeMap::new();
    base.insert("alertname".to_owned(), alertname(m.kind).to_owned());
    base.insert("decision".to_owned(), m.decision.clone());
    base.insert("severity".to_owned(), severity.to_owned());
    if !m.policies.is_empty() {
        base.insert("policy".to_owned(), m.policies.join(","));
    }
    // `bursar_job`, not `job`: Prometheus puts its scrape job in `job`, and a site's routes match on it.
    for (k, v) in [("project", &m.project), ("user", &m.user), ("bursar_job", &m.job_id)] {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            base.insert(k.to_owned(), v.clone());
        }
    }
    let mut notes = BTreeMap::new();
    notes.insert("summary".to_owned(), m.summary.clone());
    notes.insert("reason".to_owned(), m.reason.clone());
    notes.insert("notice".to_owned(), m.id.clone());
    notes.insert("decision_id".to_owned(), m.decision_id.clone());
    if let Some(d) = &m.deadline {
        notes.insert("deadline".to_owned(), d.clone());
    }
    if let Some(r) = &m.resolution {
        notes.insert("resolution".to_owned(), r.clone());
    }
    let recipients: Vec<Option<&String>> =
        if m.recipients.is_empty() { vec![None] } else { m.recipients.iter().map(Some).collect() };
    recipients
        .into_iter()
        .map(|r| {
            let mut labels = base.clone();
            let mut annotations = notes.clone();
            if let Some(r) = r {
                labels.insert("recipient".to_owned(), r.clone());
                for l in m.links.iter().filter(|l| &l.for_user == r) {
                    annotations.insert(format!("{}_url", l.action.as_str()), l.url.clone());
                }
                if let Some(answer) = answer_without_links(m, r) {
                    annotations.insert("answer".to_owned(), answer);
                }
            }
            PostableAlert {
                labels,
                annotations,
                starts_at: starts.to_string(),
                ends_at: ends.to_string(),
                generator_url: format!("{base_url}/"),
            }
        })
        .collect()
}

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The sink could not be reached, the connection broke, or TLS failed.
    #[error("{sink}: {source}")]
    Transport {
        /// The sink.
        sink: String,
        /// The error (it says what to do).
        source: bursar_http::Error,
    },
    /// The sink refused.
    #[error("{sink}: HTTP {status}: {body}")]
    Status {
        /// The sink.
        sink: String,
        /// Its status.
        status: u16,
        /// What it said.
        body: String,
    },
}

fn post(sink: &bursar_http::Client, path: &str, body: &str, headers: &[(&str, &str)]) -> Result<(), SendError> {
    let req =
        bursar_http::Request::post(path, body.as_bytes()).header("content-type", "application/json").headers(headers);
    match sink.send(&req) {
        Ok(r) if r.is_success() => Ok(()),
        Ok(r) => {
            let text = r.text();
            Err(SendError::Status { sink: sink.url_of(path), status: r.status, body: text.trim().to_owned() })
        }
        Err(source) => Err(SendError::Transport { sink: sink.url_of(path), source }),
    }
}

/// Posts `alerts` to the Alertmanager `sink` (`/api/v2/alerts` under its URL's prefix).
pub fn post_alerts(sink: &bursar_http::Client, alerts: &[PostableAlert]) -> Result<(), SendError> {
    let body = serde_json::to_string(alerts).unwrap_or_default();
    post(sink, "/api/v2/alerts", &body, &[])
}

/// Posts one notice to the webhook `sink` (its URL itself).
pub fn post_webhook(sink: &bursar_http::Client, m: &NoticeMessage) -> Result<(), SendError> {
    let body = serde_json::to_string(m).unwrap_or_default();
    let status = match m.status {
        NoticeStatus::Firing => "firing",
        NoticeStatus::Resolved => "resolved",
    };
    let key = format!("{}-{status}", m.id);
    post(sink, "", &body, &[("idempotency-key", &key)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::api::{ActionKind, NoticeLink};

    fn message() -> NoticeMessage {
        NoticeMessage {
            id: "notice-3".into(),
            status: NoticeStatus::Firing,
            kind: NoticeKind::Approval,
            recipients: vec!["bob".into(), "carol".into()],
            job_id: Some("j1".into()),
            project: Some("nlp".into()),
            user: Some("alice".into()),
            policies: vec!["approval/big".into()],
            decision: "require_approval".into(),
            decision_id: "e1/0".into(),
            summary: "job j1 waits".into(),
            reason: "big".into(),
            starts_at: Timestamp(1_000).to_string(),
            deadline: Some(Timestamp(9_000).to_string()),
            resolved_at: None,
            resolution: None,
            links: ["bob", "carol"]
                .iter()
                .map(|u| NoticeLink {
                    action: ActionKind::Approve,
                    for_user: (*u).into(),
                    url: format!("http://b/act/{u}"),
                    expires: Timestamp(9_000).to_string(),
                    token_sha256: String::new(),
                    request: None,
                })
                .collect(),
        }
    }

    #[test]
    fn one_alert_per_recipient_with_that_recipients_links() {
        let lease = bursar_model::Duration::minutes(4);
        let a = alerts(&message(), Timestamp(2_000), lease, "http://b");
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].labels["recipient"], "bob");
        assert_eq!(a[0].labels["alertname"], "BursarApprovalRequired");
        assert_eq!(a[0].annotations["approve_url"], "http://b/act/bob");
        assert_eq!(a[1].annotations["approve_url"], "http://b/act/carol");
        assert_eq!(a[0].ends_at, Timestamp(2_000).plus(lease).to_string());
        let json = serde_json::to_value(&a[0]).unwrap();
        assert!(json.get("startsAt").is_some() && json.get("generatorURL").is_some());
        // Resolved: ends when the cause ended, never before it began nor after now.
        let mut m = message();
        m.status = NoticeStatus::Resolved;
        m.resolved_at = Some(Timestamp(1_500).to_string());
        assert_eq!(alerts(&m, Timestamp(2_000), lease, "http://b")[0].ends_at, Timestamp(1_500).to_string());
        m.recipients.clear();
        let none = alerts(&m, Timestamp(2_000), lease, "http://b");
        assert_eq!(none.len(), 1);
        assert!(!none[0].labels.contains_key("recipient") && !none[0].annotations.contains_key("approve_url"));
    }

    #[test]
    fn without_links_an_open_notice_names_the_command_that_answers_it() {
        let lease = bursar_model::Duration::minutes(4);
        let with = alerts(&message(), Timestamp(2_000), lease, "http://b");
        assert!(!with[0].annotations.contains_key("answer"), "a recipient with a link needs no command");
        let mut m = message();
        m.links.clear();
        let a = alerts(&m, Timestamp(2_000), lease, "http://b");
        assert!(a.iter().all(|a| !a.annotations.keys().any(|k| k.ends_with("_url"))));
        assert_eq!(a[1].annotations["answer"], "bursar approve j1  (or: bursar reject j1 --reason …)");
        m.kind = NoticeKind::Idle;
        assert_eq!(alerts(&m, Timestamp(2_000), lease, "http://b")[0].annotations["answer"], "bursar keepalive j1");
        m.status = NoticeStatus::Resolved;
        assert!(!alerts(&m, Timestamp(2_000), lease, "http://b")[0].annotations.contains_key("answer"));
    }
}
