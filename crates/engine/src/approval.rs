//! Who may answer a held job's approval, policy by policy, and when the job is admitted.
//!
//! A job may be held by several policies, each naming its own approvers. The rule (docs/security.md
//! and docs/policy-language.md say the same): **each policy's request is answered by an approver
//! that policy names** (anyone, when it names nobody), **and the job is admitted once every
//! policy's request is granted**. One grant answers every request still waiting that its sender may
//! answer, so an approver named by all of them admits the job at once; a grant that leaves a
//! request waiting is recorded (an `alert` says who still has to answer) and the job stays held. A
//! rejection by anyone who may answer one of the requests rejects the job. The job's own user may
//! answer a policy's request only if that policy sets `self_approval = true`. An answer from
//! someone who may answer no request still waiting is ignored with an `alert` (and refused by
//! `serve` before it is applied).
//!
//! Before this, the approvers of the policies were one union: with one policy naming bob and
//! another naming bob or carol, carol's approval admitted the job although the first policy never
//! named her.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::state::Pending;

/// One policy's request for an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyAsk {
    /// The policy.
    pub policy: Arc<str>,
    /// Who may answer it; empty: any approver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<Arc<str>>,
    /// The job's own user may answer it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_approval: bool,
    /// Who granted it, once granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_by: Option<Arc<str>>,
}

impl PolicyAsk {
    /// Whether `by` may answer this request of a job of `user`.
    pub fn answerable_by(&self, by: &str, user: &str) -> bool {
        (self.approvers.is_empty() || self.approvers.iter().any(|a| &**a == by)) && (by != user || self.self_approval)
    }

    fn who(&self) -> String {
        if self.approvers.is_empty() {
            "any approver".to_owned()
        } else {
            self.approvers.iter().map(|a| &**a).collect::<Vec<_>>().join(" or ")
        }
    }
}

impl Pending {
    /// The requests, one per policy. A request recorded before requests were kept per policy (an
    /// older snapshot or journal) is one request of all its policies, with their approvers as one
    /// list, as it was answered then.
    pub fn asks(&self) -> Vec<PolicyAsk> {
        if !self.asks.is_empty() {
            return self.asks.clone();
        }
        let policy = self.policies.iter().map(|p| &**p).collect::<Vec<_>>().join(", ");
        vec![PolicyAsk {
            policy: Arc::from(policy),
            approvers: self.approvers.clone(),
            self_approval: self.self_approval,
            granted_by: None,
        }]
    }

    /// The approvers of the requests still waiting (empty when one of them may be answered by anyone).
    pub fn waiting_approvers(&self) -> Vec<Arc<str>> {
        let asks = self.asks();
        let waiting: Vec<&PolicyAsk> = asks.iter().filter(|a| a.granted_by.is_none()).collect();
        if waiting.iter().any(|a| a.approvers.is_empty()) {
            return Vec::new();
        }
        let mut out: Vec<Arc<str>> = Vec::new();
        for a in waiting.iter().flat_map(|a| a.approvers.iter()) {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }

    /// Whether the job's own user may answer one of the requests still waiting.
    pub fn waiting_self_approval(&self) -> bool {
        self.asks().iter().any(|a| a.granted_by.is_none() && a.self_approval)
    }

    /// Which requests `by` answers with a grant (`granting`) or a rejection of a job of `user`:
    /// their indexes in [`Pending::asks`], or why none (the sentence after "… by bob ignored: ").
    pub fn answers(&self, by: &str, user: &str, granting: bool) -> Result<Vec<usize>, String> {
        let asks = self.asks();
        let open: Vec<usize> =
            (0..asks.len()).filter(|i| !granting || asks.get(*i).is_some_and(|a| a.granted_by.is_none())).collect();
        let mine: Vec<usize> =
            open.iter().copied().filter(|i| asks.get(*i).is_some_and(|a| a.answerable_by(by, user))).collect();
        if !mine.is_empty() {
            return Ok(mine);
        }
        let named = open
            .iter()
            .filter_map(|i| asks.get(*i))
            .any(|a| a.approvers.is_empty() || a.approvers.iter().any(|x| &**x == by));
        let verb = if granting { "approve" } else { "reject" };
        if named && by == user {
            return Err(format!(
                "{by} submitted it, and a job's own user may not answer its approval (the policy does not set `self_approval = true`)"
            ));
        }
        if asks.len() == 1 {
            return Err(format!(
                "only {} may {verb} it",
                asks[0].approvers.iter().map(|a| &**a).collect::<Vec<_>>().join(", ")
            ));
        }
        Err(format!("{by} may answer none of its requests still waiting: {}", waiting_text(&asks)))
    }

    /// Records a grant by `by` of the requests `answered`; true when every request is granted.
    pub fn grant(&mut self, answered: &[usize], by: &str) -> bool {
        let mut asks = self.asks();
        for i in answered {
            if let Some(a) = asks.get_mut(*i) {
                a.granted_by = Some(Arc::from(by));
            }
        }
        let done = asks.iter().all(|a| a.granted_by.is_some());
        self.asks = asks;
        done
    }

    /// Who granted which request, for the admission's reason: `bob` when one person granted all,
    /// else `bob (approval/big), carol (approval/gpu-type)`.
    pub fn granted_by(&self) -> String {
        let asks = self.asks();
        let mut who: Vec<&str> = asks.iter().filter_map(|a| a.granted_by.as_deref()).collect();
        who.dedup();
        if who.len() <= 1 {
            return who.first().map_or_else(|| "an unnamed approver".to_owned(), |w| (*w).to_owned());
        }
        asks.iter()
            .filter_map(|a| a.granted_by.as_deref().map(|w| format!("{w} ({})", a.policy)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The requests still waiting, for an alert: `approval/big (bob)`.
    pub fn waiting(&self) -> String {
        waiting_text(&self.asks())
    }
}

fn waiting_text(asks: &[PolicyAsk]) -> String {
    asks.iter()
        .filter(|a| a.granted_by.is_none())
        .map(|a| format!("{} ({})", a.policy, a.who()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::Timestamp;

    fn ask(policy: &str, approvers: &[&str], self_approval: bool) -> PolicyAsk {
        PolicyAsk {
            policy: Arc::from(policy),
            approvers: approvers.iter().map(|a| Arc::from(*a)).collect(),
            self_approval,
            granted_by: None,
        }
    }

    fn pending(asks: Vec<PolicyAsk>) -> Pending {
        Pending {
            approvers: Vec::new(),
            expires: Timestamp(0),
            policies: asks.iter().map(|a| a.policy.clone()).collect(),
            reason: String::new(),
            self_approval: false,
            asks,
        }
    }

    #[test]
    fn each_policy_is_answered_by_its_own_approvers() {
        // Issue 46: one policy names bob, the other bob or carol.
        let mut p = pending(vec![ask("a", &["bob"], false), ask("b", &["bob", "carol"], false)]);
        assert_eq!(p.answers("carol", "alice", true), Ok(vec![1]));
        assert!(!p.grant(&[1], "carol"), "carol answers only b: the job waits for a");
        assert_eq!(p.waiting(), "a (bob)");
        assert_eq!(p.waiting_approvers(), vec![Arc::<str>::from("bob")]);
        let e = p.answers("carol", "alice", true).unwrap_err();
        assert!(e.contains("carol may answer none of its requests still waiting: a (bob)"), "{e}");
        assert_eq!(p.answers("bob", "alice", true), Ok(vec![0]));
        assert!(p.grant(&[0], "bob"));
        assert_eq!(p.granted_by(), "bob (a), carol (b)");
        // bob alone answers both at once.
        let mut p = pending(vec![ask("a", &["bob"], false), ask("b", &["bob", "carol"], false)]);
        let all = p.answers("bob", "alice", true).unwrap();
        assert!(p.grant(&all, "bob"));
        assert_eq!(p.granted_by(), "bob");
        // A rejection by anyone one policy names rejects.
        let p = pending(vec![ask("a", &["bob"], false), ask("b", &["carol"], false)]);
        assert_eq!(p.answers("carol", "alice", false), Ok(vec![1]));
        assert!(p.answers("dave", "alice", false).is_err());
    }

    #[test]
    fn a_user_answers_only_the_requests_that_allow_it() {
        let p = pending(vec![ask("a", &[], true), ask("b", &[], false)]);
        assert_eq!(p.answers("alice", "alice", true), Ok(vec![0]));
        let p = pending(vec![ask("b", &["alice"], false)]);
        assert!(p.answers("alice", "alice", true).unwrap_err().contains("own user may not answer"));
    }

    #[test]
    fn an_older_request_is_one_request_of_the_union() {
        let mut p = pending(Vec::new());
        p.policies = vec![Arc::from("a"), Arc::from("b")];
        p.approvers = vec![Arc::from("bob"), Arc::from("carol")];
        assert_eq!(p.answers("carol", "alice", true), Ok(vec![0]));
        assert!(p.grant(&[0], "carol"));
        let e = pending(vec![ask("a", &["bob"], false)]).answers("mallory", "alice", true).unwrap_err();
        assert_eq!(e, "only bob may approve it");
    }
}
