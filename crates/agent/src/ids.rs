//! The ids serve keeps: every input a sender posts is kept in the sender's namespace,
//! `<namespace>:<id>` (`bursar_session::namespaced`, called on every authenticated input; the
//! namespace is a principal's name, or `~<name>` for a person: `bursar_auth::Caller::id_namespace`),
//! so two senders never share an id. A namespace holds no `:` (neither a principal's nor a
//! person's name may); the id after it may. An id read without a sender (`bursar eval`, a replayed
//! file, serve without authentication) is kept as it was posted.
//!
//! An agent that recognises its own events in the decision stream (the submission its admission
//! agent posted) asks [`posted_as`] rather than parsing the kept id itself.

/// What separates a sender's namespace from the id it posted (`bursar_auth::ID_SEPARATOR`).
pub const SEPARATOR: char = ':';

/// Whether `kept`, an id as serve keeps it, is the id `posted` as some sender posted it
/// (`<namespace>:<posted>`), or `posted` itself (read without a sender). Pure.
pub fn posted_as(kept: &str, posted: &str) -> bool {
    kept == posted || kept.split_once(SEPARATOR).is_some_and(|(namespace, id)| !namespace.is_empty() && id == posted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_id_is_the_posted_one_under_one_principal() {
        assert!(posted_as("sub-lab-1", "sub-lab-1"), "read without a principal");
        assert!(posted_as("slurmctld:sub-lab-1", "sub-lab-1"));
        assert!(posted_as("kube-checks:gpu-a-1-submitted", "gpu-a-1-submitted"));
        assert!(posted_as("~alice:sub-lab-1", "sub-lab-1"), "a person's namespace");
        // The namespace is everything before the first `:`; the posted id may hold one.
        assert!(posted_as("p:a:b", "a:b"));
        assert!(!posted_as("p:a:b", "b"), "`a:b` posted by `p` is not `b`");
        assert!(posted_as("a:b", "a:b"), "an id with a `:` read without a principal");
        assert!(!posted_as("bob:cli-approve-sub-lab-1", "sub-lab-1"));
        assert!(!posted_as("xsub-lab-1", "sub-lab-1"));
        assert!(!posted_as(":sub-lab-1", "sub-lab-1"), "no namespace is empty");
    }
}
