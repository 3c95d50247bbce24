//! [`Sender`]: who sent an input to `bursar serve`, and how they proved it.
//!
//! The server authenticates every request before it decodes the body (`bursar-auth`); what it
//! learns travels with each input to the engine thread and into the audit log beside the input
//! (`events.sender`), so `bursar audit explain` can say "approved by bob (MUNGE, uid 1001)" and a
//! reviewer can tell a link from a terminal from a forged `by`. Inputs read from a file (`eval`,
//! `replay`) have no sender.

use serde::{Deserialize, Serialize};

/// Who sent an input and how they proved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The principal's name (`slurmctld`, `bob`).
    pub principal: String,
    /// How the credential proved it: `token`, `jwt`, `munge`, `cert`, `proxy`, `unix`, `link`,
    /// `open` (no principals configured: a loopback server without authentication) or `bursar`
    /// (bursar's own sources, such as the Prometheus utilisation reader).
    pub via: String,
    /// What the proof said, for the record: the token's label, the JWT's issuer and expiry, the
    /// MUNGE credential's UID, the certificate's subject, the proxy's address, the notice of a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Sender {
    /// A sender without detail.
    pub fn new(principal: impl Into<String>, via: impl Into<String>) -> Sender {
        Sender { principal: principal.into(), via: via.into(), detail: None }
    }

    /// The stored form: one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// For people: `bob (munge: uid 1001)`.
    pub fn describe(&self) -> String {
        match &self.detail {
            Some(d) => format!("{} ({}: {d})", self.principal, self.via),
            None => format!("{} ({})", self.principal, self.via),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_is_stored_as_one_object_and_read_back() {
        let s = Sender { principal: "bob".into(), via: "munge".into(), detail: Some("uid 1001".into()) };
        let text = s.to_json();
        assert_eq!(text, r#"{"principal":"bob","via":"munge","detail":"uid 1001"}"#);
        assert_eq!(serde_json::from_str::<Sender>(&text).unwrap(), s);
        assert_eq!(s.describe(), "bob (munge: uid 1001)");
        assert_eq!(Sender::new("slurmctld", "token").to_json(), r#"{"principal":"slurmctld","via":"token"}"#);
    }
}
